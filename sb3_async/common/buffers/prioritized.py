"""Proportional prioritized experience replay (Schaul et al. 2016), the replay of Ape-X (Horgan et al. 2018), as a
drop-in SB3 ``ReplayBuffer`` with SB3 2.9's n-step semantics."""

from __future__ import annotations

from typing import Any, NamedTuple, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer, ReplayBuffer
from stable_baselines3.common.vec_env import VecNormalize

from sb3_async.common.buffers.ages import ring_ages, sample_ages_of
from sb3_async.common.buffers.frames import FramePool, is_frame_space
from sb3_async.common.buffers.n_step import check_n_step_buffer, n_step_batch
from sb3_async.common.buffers.sum_tree import SumTree
from sb3_async.validation import check_float


class PrioritizedReplayBufferSamples(NamedTuple):
    """SB3's ``ReplayBufferSamples`` fields, plus the importance-sampling ``weights`` and the sampled ``indices``."""

    observations: th.Tensor
    actions: th.Tensor
    next_observations: th.Tensor
    dones: th.Tensor
    rewards: th.Tensor
    discounts: th.Tensor | None
    weights: th.Tensor  # (batch, 1)
    indices: np.ndarray  # (batch,) transition ids to pass back to update_priorities


class PrioritizedArrays(NamedTuple):
    """The NumPy arrays behind :class:`PrioritizedReplayBufferSamples` (reused between samples: copy to keep them)."""

    observations: np.ndarray
    actions: np.ndarray
    next_observations: np.ndarray
    dones: np.ndarray
    rewards: np.ndarray
    discounts: np.ndarray | None
    weights: np.ndarray
    indices: np.ndarray


def importance_weights(leaf_values: np.ndarray, min_leaf_value: float, beta: float) -> np.ndarray:
    """IS weights ``w_i = (N P(i))^-beta / max_j w_j`` (Schaul et al. 2016, §3.4) from the tree's leaves ``p_i^alpha``.

    With ``P(i) = p_i^alpha / sum_k p_k^alpha``, the largest possible weight is that of the smallest priority, and
    ``N`` and the sum cancel: ``w_i = (p_i^alpha / min_k p_k^alpha)^-beta``.

    :param leaf_values: ``p_i^alpha`` of the sampled transitions
    :param min_leaf_value: the smallest ``p_k^alpha`` in the buffer
    :param beta: importance-sampling exponent
    """
    return (leaf_values / min_leaf_value) ** (-beta)


def one_step_block(*arrays: Any) -> list[Any]:
    """One step's arrays (one row per env) as a block of one step for ``extend()`` (None stays None)."""
    return [None if array is None else np.asarray(array)[None] for array in arrays]


def check_priorities(priorities: np.ndarray, name: str = "priorities") -> np.ndarray:
    """``priorities`` as float64, or a ``ValueError`` naming the argument if any is negative or not finite."""
    priorities = np.asarray(priorities, dtype=np.float64)
    if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
        bad = priorities[~(np.isfinite(priorities) & (priorities >= 0))]
        raise ValueError(f"Invalid {name}: expected finite non-negative values, got {bad[:5].tolist()}")
    return priorities


class PrioritizedReplayBuffer(ReplayBuffer):
    """
    Proportional prioritized replay (`Schaul et al. 2016 <https://arxiv.org/abs/1511.05952>`_), the replay of Ape-X
    (`Horgan et al. 2018 <https://arxiv.org/abs/1803.00933>`_).

    A transition ``i`` is sampled with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` (stratified, one descent
    of a NumPy sum tree for the whole batch) and weighted by ``w_i = (N P(i))^-beta / max_j w_j``. New transitions get
    the priorities given to :meth:`add` (Ape-X actors compute them) or else the largest priority so far. One tree over
    all ``(position, env)`` slots; FIFO overwrite. Every slot has a write counter, folded into the sampled
    ``indices`` (``index = slot + capacity * writes_before``), so a late ``update_priorities`` for a transition that
    has been overwritten since it was sampled is dropped.

    ``n_steps > 1`` gives SB3 2.9's n-step returns and ``discounts`` exactly as ``NStepReplayBuffer``. Stock SB3
    algorithms can use this buffer (they sample by priority and ignore the weights); annealing ``beta`` and
    updating priorities is the algorithm's part.

    :param buffer_size: capacity (transitions, over all envs)
    :param observation_space: observation space (``Dict`` spaces are refused)
    :param action_space: action space
    :param device: PyTorch device
    :param n_envs: number of parallel envs
    :param optimize_memory_usage: SB3's memory-efficient storage (next observation from the next slot)
    :param handle_timeout_termination: time-limit truncations are not terminal (SB3's meaning)
    :param alpha: priority exponent; default 0.6 from Ape-X (appendix, as Schaul et al.'s proportional variant)
    :param beta: default importance-sampling exponent of :meth:`sample`; 0.4 from Ape-X (appendix)
    :param eps: added to every priority given to :meth:`add` and :meth:`update_priorities` (``p = |delta| + eps``,
        Schaul et al. §3.3) so no transition becomes unsampleable; 1e-6 (the paper gives no value)
    :param n_steps: n of n-step returns (1: one-step transitions, ``discounts`` is None as in SB3's ``ReplayBuffer``)
    :param gamma: discount of the n-step returns (used only when ``n_steps > 1``)
    :param share_frames: store each distinct frame of image observations once
        (:class:`~sb3_async.common.buffers.frames.FramePool`: stacked frames and next observations by reference,
        samples identical to full copies); default: on for channel-first uint8 images, off otherwise
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        n_steps: int = 1,
        gamma: float = 0.99,
        share_frames: bool | None = None,
    ) -> None:
        self.n_steps, self.gamma = check_n_step_buffer(
            type(self).__name__, observation_space, n_steps, gamma, optimize_memory_usage
        )
        self.alpha, self.beta = check_float("alpha", alpha), check_float("beta", beta)
        if not check_float("eps", eps) > 0:
            raise ValueError(f"Invalid eps={eps!r}: expected a positive number")
        self.eps = float(eps)
        self.share_frames = is_frame_space(observation_space) and not optimize_memory_usage
        if share_frames is not None:
            if share_frames and not is_frame_space(observation_space):
                raise ValueError(
                    f"Invalid share_frames=True for observation_space={observation_space}: expected channel-first uint8 images"
                )
            if share_frames and optimize_memory_usage:
                raise ValueError("Invalid share_frames=True with optimize_memory_usage=True: choose one storage")
            self.share_frames = bool(share_frames)
        if self.share_frames:
            self._init_frame_storage(buffer_size, observation_space, action_space, device, n_envs, handle_timeout_termination)
        else:
            super().__init__(
                buffer_size,
                observation_space,
                action_space,
                device=device,
                n_envs=n_envs,
                optimize_memory_usage=optimize_memory_usage,
                handle_timeout_termination=handle_timeout_termination,
            )
        self.capacity = self.buffer_size * self.n_envs
        self.tree = SumTree(self.capacity)
        self.write_counts = np.zeros(self.capacity, dtype=np.int64)
        self.max_priority = 1.0
        self._outputs: dict[str, np.ndarray] = {}

    def _init_frame_storage(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str,
        n_envs: int,
        handle_timeout_termination: bool,
    ) -> None:
        """SB3's ``ReplayBuffer`` arrays, with frame ids instead of the observation arrays."""
        BaseBuffer.__init__(self, buffer_size, observation_space, action_space, device=device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.optimize_memory_usage = False
        self.handle_timeout_termination = handle_timeout_termination
        action_dtype = self._maybe_cast_dtype(action_space.dtype)
        self.actions = np.zeros((self.buffer_size, self.n_envs, self.action_dim), dtype=action_dtype)
        self.rewards = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.dones = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.timeouts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        stack, *frame_shape = self.obs_shape
        chunk = int(np.clip(self.buffer_size * self.n_envs // 16, 1024, 65536))  # growth by ~1/16 of the capacity
        self.frames = FramePool(tuple(frame_shape), observation_space.dtype, chunk_frames=chunk)
        # frame ids of each stored observation and next observation; -1: empty
        self.obs_frames = np.full((self.buffer_size, self.n_envs, stack), -1, dtype=np.int32)
        self.next_obs_frames = np.full((self.buffer_size, self.n_envs, stack), -1, dtype=np.int32)

    def _store_frames(self, rows: slice, obs: np.ndarray, next_obs: np.ndarray) -> None:
        """share_frames: the observations of ``rows`` become ``obs`` and ``next_obs``; the replaced ones' frames lose a
        reference (after the new ones are added, so that a frame both keep is not stored again)."""
        old = np.concatenate([self.obs_frames[rows].reshape(-1), self.next_obs_frames[rows].reshape(-1)])
        self.obs_frames[rows] = self.frames.add(obs).reshape(self.obs_frames[rows].shape)
        self.next_obs_frames[rows] = self.frames.add(next_obs).reshape(self.next_obs_frames[rows].shape)
        self.frames.release(old[old >= 0])

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
        priorities: np.ndarray | None = None,
        **columns: np.ndarray | None,
    ) -> None:
        """
        Store one transition per env, with priority ``priorities + eps`` if given (one per env), else the largest
        priority so far.

        :param priorities: initial priorities ``|delta|`` of the ``n_envs`` transitions (e.g. from an Ape-X actor)
        :param columns: what a subclass's :meth:`extend` stores besides, one row per env (``next_masks`` of
            :class:`~sb3_async.common.buffers.masked.MaskedPrioritizedReplayBuffer`)
        """
        if self.share_frames or columns:  # as a block of one step
            obs, next_obs, action, reward, done, priorities, *extra = one_step_block(
                obs, next_obs, action, reward, done, priorities, *columns.values()
            )
            self.extend(obs, next_obs, action, reward, done, [infos], priorities=priorities, **dict(zip(columns, extra)))
            return
        new = self._initial_priorities(priorities, self.n_envs)
        pos = self.pos
        super().add(obs, next_obs, action, reward, done, infos)
        first = pos * self.n_envs
        self.write_counts[first : first + self.n_envs] += 1
        self.tree.update_range(first, new**self.alpha)
        if self.optimize_memory_usage:
            self._invalidate_row(self.pos)

    def extend(  # type: ignore[override]
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[list[dict[str, Any]]] | None,
        priorities: np.ndarray | None = None,
    ) -> None:
        """
        Store a block of ``T`` steps at once (e.g. an Ape-X actor's local buffer of 50 transitions): the same result
        as ``T`` calls of :meth:`add`, with array writes instead of a Python loop.

        :param obs: ``(T, n_envs, *obs_shape)``, and likewise ``next_obs``, ``action`` ``(T, n_envs, action_dim)``,
            ``reward`` and ``done`` ``(T, n_envs)``
        :param infos: ``T`` lists of ``n_envs`` info dicts (``TimeLimit.truncated`` is read from them), or None when
            no step was truncated by a time limit
        :param priorities: initial priorities ``(T, n_envs)``, or None for the largest priority so far
        """
        steps = len(reward)
        if not 0 < steps <= self.buffer_size:
            raise ValueError(f"Invalid block of {steps} steps: expected 1 to buffer_size ({self.buffer_size}) steps")
        new = self._initial_priorities(priorities, steps * self.n_envs)
        pos = self.pos
        # Contiguous runs of rows (two when the block wraps around): slices, not gathers
        runs = [(pos, min(steps, self.buffer_size - pos))]
        if runs[0][1] < steps:
            runs.append((0, steps - runs[0][1]))
        obs = np.asarray(obs).reshape(steps, self.n_envs, *self.obs_shape)
        next_obs = np.asarray(next_obs).reshape(steps, self.n_envs, *self.obs_shape)
        action = np.asarray(action).reshape(steps, self.n_envs, self.action_dim)
        reward = np.asarray(reward).reshape(steps, self.n_envs)
        done = np.asarray(done).reshape(steps, self.n_envs)
        if self.handle_timeout_termination and infos is not None:
            timeouts = np.array([[info.get("TimeLimit.truncated", False) for info in step] for step in infos])
        else:
            timeouts = np.zeros((steps, self.n_envs))
        priority_values = (new**self.alpha).reshape(steps, self.n_envs)
        offset = 0
        for row, length in runs:
            rows, part = slice(row, row + length), slice(offset, offset + length)
            if self.share_frames:
                self._store_frames(rows, obs[part], next_obs[part])
            else:
                self.observations[rows] = obs[part]
            if not self.optimize_memory_usage and not self.share_frames:
                self.next_observations[rows] = next_obs[part]
            self.actions[rows] = action[part]
            self.rewards[rows] = reward[part]
            self.dones[rows] = done[part]
            self.timeouts[rows] = timeouts[part]
            slots = slice(row * self.n_envs, (row + length) * self.n_envs)
            self.write_counts[slots] += 1
            self.tree.update_range(row * self.n_envs, priority_values[part].reshape(-1))
            offset += length
        self.full = self.full or pos + steps >= self.buffer_size
        self.pos = (pos + steps) % self.buffer_size
        if self.optimize_memory_usage:
            # As T adds: each next observation but the last is overwritten by the following observation.
            self.observations[self.pos] = next_obs[-1]
            self._invalidate_row(self.pos)
            # T adds would also have invalidated each row of the block before writing it (one more write count)
            later_rows = (pos + 1 + np.arange(steps - 1)) % self.buffer_size
            self.write_counts[(later_rows[:, None] * self.n_envs + np.arange(self.n_envs)).reshape(-1)] += 1

    def _initial_priorities(self, priorities: np.ndarray | None, count: int) -> np.ndarray:
        """Priorities of ``count`` new transitions: the given ones plus ``eps``, or the largest priority so far."""
        if priorities is None:
            return np.full(count, self.max_priority)
        new = check_priorities(priorities).reshape(-1) + self.eps
        if new.size != count:
            raise ValueError(f"Invalid priorities with {new.size} values: expected one per new transition ({count})")
        self.max_priority = max(self.max_priority, float(new.max()))
        return new

    def _invalidate_row(self, row: int) -> None:
        """optimize_memory_usage: the row's observation was overwritten by the previous next observation, so its old
        transitions are invalid: priority 0, and a new write count so that late priority updates for them are dropped."""
        first = row * self.n_envs
        self.write_counts[first : first + self.n_envs] += 1
        self.tree.update_range(first, 0.0, count=self.n_envs)

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """
        Set the priorities of sampled transitions to ``priorities + eps`` (``priorities = |TD error|``); updates for
        transitions overwritten since they were sampled are dropped.

        :param indices: the ``indices`` of a sample
        :param priorities: new priorities, one per index, finite and non-negative
        """
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        new = check_priorities(priorities).reshape(-1) + self.eps
        if new.shape != indices.shape:
            raise ValueError(f"Invalid priorities with {new.size} values: expected one per index ({indices.size})")
        if np.any(indices < 0):
            raise ValueError("Invalid indices: expected the non-negative indices returned by sample()")
        slots = indices % self.capacity
        fresh = self.write_counts[slots] - 1 == indices // self.capacity
        if not fresh.all():
            slots, new = slots[fresh], new[fresh]
        self.tree.update(slots, new**self.alpha)
        if len(new):
            self.max_priority = max(self.max_priority, float(new.max()))

    def _out(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A reusable output array (gathers write into it instead of allocating a new one per sample)."""
        out = self._outputs.get(name)
        if out is None or out.shape != shape or out.dtype != dtype:
            out = np.empty(shape, dtype=dtype)
            self._outputs[name] = out
        return out

    def sample_arrays(self, batch_size: int, beta: float | None = None, env: VecNormalize | None = None) -> PrioritizedArrays:
        """
        Sample ``batch_size`` transitions by priority, as NumPy arrays (overwritten by the next call).

        :param batch_size: number of transitions
        :param beta: importance-sampling exponent (default: the buffer's ``beta``)
        :param env: SB3's VecNormalize, to normalize observations and rewards
        """
        if self.tree.total <= 0:
            raise ValueError("Cannot sample from an empty PrioritizedReplayBuffer")
        return self._gather_slots(self.tree.sample(batch_size), self.beta if beta is None else float(beta), env)

    def _gather_slots(self, slots: np.ndarray, beta: float, env: VecNormalize | None) -> PrioritizedArrays:
        """The arrays of the transitions in ``slots`` (``position * n_envs + env``), with their IS weights."""
        batch_size = len(slots)
        leaf_values = self.tree.leaves(slots)
        weights = importance_weights(leaf_values, self.tree.min, beta).astype(np.float32).reshape(-1, 1)
        indices = slots + self.capacity * (self.write_counts[slots] - 1)
        rows, env_inds = np.divmod(slots, self.n_envs)
        sample_ages_of(self).add(ring_ages(rows, self.pos, self.buffer_size))
        obs = self._gather_obs("observations", self._obs_table(), slots)
        actions = np.take(
            self.actions.reshape(self.capacity, -1),
            slots,
            axis=0,
            out=self._out("actions", (batch_size, self.action_dim), self.actions.dtype),
            mode="clip",
        )
        discounts: np.ndarray | None = None
        if self.n_steps > 1:
            batch = n_step_batch(
                self.rewards,
                self.dones,
                self.timeouts,
                self.pos,
                rows,
                env_inds,
                self.n_steps,
                self.gamma,
                lambda r: self._normalize_reward(r, env),
            )
            next_slots = batch.last_inds * self.n_envs + env_inds
            next_obs = self._gather_obs("next_observations", self._obs_table(following=True), next_slots)
            rewards, dones, discounts = batch.rewards, batch.dones, batch.discounts
        else:
            if self.optimize_memory_usage:
                next_slots = ((rows + 1) % self.buffer_size) * self.n_envs + env_inds
                next_obs = self._gather_obs("next_observations", self.observations, next_slots)
            else:
                next_obs = self._gather_obs("next_observations", self._obs_table(following=True), slots)
            flat_dones = self.dones.reshape(-1)[slots]
            dones = (flat_dones * (1 - self.timeouts.reshape(-1)[slots])).reshape(-1, 1)
            rewards = self._normalize_reward(self.rewards.reshape(-1)[slots].reshape(-1, 1), env)
        if env is not None:
            obs = cast(np.ndarray, self._normalize_obs(obs, env))
            next_obs = cast(np.ndarray, self._normalize_obs(next_obs, env))
        return PrioritizedArrays(obs, actions, next_obs, dones, rewards, discounts, weights, indices)

    def _obs_table(self, following: bool = False) -> np.ndarray:
        """The observations (``following``: the next observations) of every slot: arrays, or frame ids with
        share_frames."""
        if self.share_frames:
            return self.next_obs_frames if following else self.obs_frames
        return self.next_observations if following else self.observations

    def _gather_obs(self, name: str, source: np.ndarray, slots: np.ndarray) -> np.ndarray:
        if self.share_frames:
            out = self._out(name, (len(slots), *self.obs_shape), self.frames.dtype)
            return self.frames.gather(source.reshape(self.capacity, -1)[slots], out)
        flat = source.reshape(self.capacity, *self.obs_shape)
        out = self._out(name, (len(slots), *self.obs_shape), source.dtype)
        # mode="clip" skips the bounds check (slots are in range): much faster for large frames
        return np.take(flat, slots, axis=0, out=out, mode="clip")

    def sample(  # type: ignore[override]
        self, batch_size: int, env: VecNormalize | None = None, beta: float | None = None
    ) -> PrioritizedReplayBufferSamples:
        """
        Sample ``batch_size`` transitions by priority (torch tensors, plus the NumPy ``indices``).

        :param batch_size: number of transitions
        :param env: SB3's VecNormalize, to normalize observations and rewards
        :param beta: importance-sampling exponent (default: the buffer's ``beta``; annealing it is the algorithm's)
        """
        arrays = self.sample_arrays(batch_size, beta=beta, env=env)
        return PrioritizedReplayBufferSamples(
            observations=self.to_torch(arrays.observations),
            actions=self.to_torch(arrays.actions),
            next_observations=self.to_torch(arrays.next_observations),
            dones=self.to_torch(arrays.dones),
            rewards=self.to_torch(arrays.rewards),
            discounts=None if arrays.discounts is None else self.to_torch(arrays.discounts),
            weights=self.to_torch(arrays.weights),
            indices=arrays.indices.copy(),
        )

    def stats(self) -> dict[str, float]:
        """What ``ReplayStatsCallback`` logs: the largest priority and the tree's total priority mass."""
        return {"replay/max_priority": self.max_priority, "replay/priority_sum": self.tree.total}


def check_replay_memory(buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """``ValueError`` naming ``buffer_size`` when even the smallest storage of that many transitions (one new frame
    per transition for stacked frames, one observation otherwise) exceeds this machine's memory (RAM and swap): such a
    replay would fail with a ``MemoryError`` once built (Ape-X builds it in ``learn()``)."""
    import psutil

    obs_shape = observation_space.shape or (1,)
    obs_bytes = int(np.prod(obs_shape)) * np.dtype(observation_space.dtype or np.float32).itemsize
    if is_frame_space(observation_space):
        obs_bytes //= max(1, int(obs_shape[0]))  # stacks share frames: one new frame per step
    act_bytes = int(np.prod(action_space.shape or (1,))) * np.dtype(action_space.dtype or np.int64).itemsize
    need = buffer_size * (obs_bytes + act_bytes + 8)  # + reward, done and priority at least
    have = psutil.virtual_memory().total + psutil.swap_memory().total
    if need > have:
        raise ValueError(
            f"Invalid buffer_size={buffer_size}: its replay would need at least {need / 2**30:,.1f} GiB of memory, and "
            f"this machine has {have / 2**30:,.1f} GiB (RAM and swap)"
        )
