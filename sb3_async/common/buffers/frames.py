"""Each distinct frame stored once: the storage of stacked image observations in
:class:`~sb3_async.common.buffers.prioritized.PrioritizedReplayBuffer`.

Consecutive frame-stacked observations (``VecFrameStack``, ``frame_stack: 4``) share all frames but one, and an
n-step transition's next observation is a later transition's observation: storing every observation and next
observation in full keeps each frame up to ``2 * stack`` times. Here an observation is a row of frame ids into a
:class:`FramePool` that stores each distinct frame (one channel plane) once, counted by reference and freed when no
stored observation uses it any more. This is what SB3's ``optimize_memory_usage`` does for one-step transitions of one
env, done by content so that it holds whatever the order of the transitions (Ape-X's blocks from many actors, n-step
next observations, episode boundaries).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
from gymnasium import spaces


def is_frame_space(space: spaces.Space) -> bool:
    """Whether observations of ``space`` are stacks of image frames along their first axis (channel-first uint8
    images, as SB3's ``CnnPolicy`` sees them after ``VecTransposeImage``)."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


class FramePool:
    """Frames of one shape, each distinct frame stored once, with reference counts.

    Storage grows by chunks of ``chunk_frames`` frames (no reallocation of what is stored); freed slots are reused
    first, so the memory used follows the largest number of frames alive at once.

    :param frame_shape: shape of one frame
    :param dtype: dtype of the frames
    :param chunk_frames: frames per storage chunk
    """

    def __init__(self, frame_shape: tuple[int, ...], dtype: Any, chunk_frames: int = 65536):
        self.frame_shape = tuple(int(n) for n in frame_shape)
        self.dtype = np.dtype(dtype)
        self.chunk_frames = int(chunk_frames)
        self.chunks: list[np.ndarray] = []
        self.refcounts = np.zeros(0, dtype=np.int32)
        self.keys = np.zeros(0, dtype=np.uint64)  # content key of each slot
        self.index: dict[int, int] = {}  # content key -> a slot holding that content
        self.free: list[int] = []
        self.n_slots = 0  # slots ever used (the high-water mark)

    def __len__(self) -> int:
        """Frames stored (referenced at least once)."""
        return self.n_slots - len(self.free)

    @property
    def nbytes(self) -> int:
        """Bytes of the frame storage allocated (all chunks)."""
        return sum(chunk.nbytes for chunk in self.chunks)

    def _allocate(self) -> int:
        if self.free:
            return self.free.pop()
        if self.n_slots == len(self.chunks) * self.chunk_frames:
            self.chunks.append(np.empty((self.chunk_frames, *self.frame_shape), dtype=self.dtype))
            self.refcounts = np.concatenate([self.refcounts, np.zeros(self.chunk_frames, dtype=np.int32)])
            self.keys = np.concatenate([self.keys, np.zeros(self.chunk_frames, dtype=np.uint64)])
        self.n_slots += 1
        return self.n_slots - 1

    def _frame(self, slot: int) -> np.ndarray:
        chunk, offset = divmod(slot, self.chunk_frames)
        return self.chunks[chunk][offset]

    def add(self, frames: np.ndarray) -> np.ndarray:
        """Store ``frames`` (``(M, *frame_shape)``), each one referenced once more; returns their ids ``(M,)``."""
        frames = np.ascontiguousarray(frames, dtype=self.dtype).reshape(-1, *self.frame_shape)
        ids = np.empty(len(frames), dtype=np.int32)
        for i, frame in enumerate(frames):
            key = int.from_bytes(hashlib.blake2b(frame.data, digest_size=8).digest(), "little")
            slot = self.index.get(key)
            if slot is None or not np.array_equal(self._frame(slot), frame):  # a new content (or a key collision)
                new = self._allocate()
                self._frame(new)[...] = frame
                self.keys[new] = key
                if slot is None:
                    self.index[key] = new
                slot = new
            self.refcounts[slot] += 1
            ids[i] = slot
        return ids

    def release(self, ids: np.ndarray) -> None:
        """Drop one reference to each of ``ids``; frames no longer referenced are freed."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not len(ids):
            return
        np.subtract.at(self.refcounts, ids, 1)
        unique = np.unique(ids)
        for slot in unique[self.refcounts[unique] == 0].tolist():
            self.free.append(slot)
            key = int(self.keys[slot])
            if self.index.get(key) == slot:
                del self.index[key]

    def gather(self, ids: np.ndarray, out: np.ndarray) -> np.ndarray:
        """The frames ``ids`` (any shape) into ``out`` (``(*ids.shape, *frame_shape)``)."""
        flat_ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        flat_out = out.reshape(-1, *self.frame_shape)
        chunk, offset = np.divmod(flat_ids, self.chunk_frames)
        if len(self.chunks) == 1:
            np.take(self.chunks[0], offset, axis=0, out=flat_out, mode="clip")
        else:
            for c in np.unique(chunk).tolist():
                rows = np.flatnonzero(chunk == c)
                flat_out[rows] = self.chunks[c][offset[rows]]
        return out
