"""Saves that a crash cannot half-write: ``save()`` and ``save_replay_buffer()`` write a temporary file next to the
target and rename it over the target once it is complete, so a process killed mid-save leaves the previous file."""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import pickle
import secrets
import warnings
from collections.abc import Iterator
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import save_to_pkl

#: What a file path may be (SB3 also accepts open binary files, written in place).
PathLike = str | os.PathLike


def _target_path(path: PathLike, suffix: str) -> pathlib.Path:
    """The file SB3 would write for ``path``: ``suffix`` added when the name has none, ``_2`` after a folder's name."""
    target = pathlib.Path(path)
    if target.suffix == "":
        target = pathlib.Path(f"{target}.{suffix}")
    if target.is_dir():
        warnings.warn(f"Path '{target}' is a folder. Will save instead to {target}_2", stacklevel=3)
        target = pathlib.Path(f"{target}_2")
    return target


def _fsync_folder(folder: pathlib.Path) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: PathLike | io.BufferedIOBase, suffix: str) -> Iterator[Any]:
    """An open binary file to write ``path``'s new content to, which replaces ``path`` only once it is complete.

    The content goes to a hidden temporary file in the target's folder, is flushed to disk (``fsync``) and renamed
    over the target (``os.replace``, atomic): a process killed at any moment leaves either the previous file or the
    new one, never a truncated one (at worst, a stray ``.<name>.<token>.tmp`` file beside it). An error while writing
    removes the temporary file and leaves the target as it was. An open file given instead of a path is yielded as
    it is (written in place).

    :param path: the file to write (SB3's convention: ``.suffix`` added when the name has none), or an open file
    :param suffix: the suffix to add to a path without one (``"zip"``, ``"pkl"``)
    """
    if not isinstance(path, (str, os.PathLike)):
        yield path
        return
    target = _target_path(path, suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    # O_EXCL: a fresh file; mode 0o666 so the umask applies as for a file open() creates
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(target.parent)


@contextlib.contextmanager
def replay_file_errors(path: Any) -> Iterator[None]:
    """Turn the errors of unpickling a truncated or corrupt replay file into a ``ValueError`` naming the file."""
    try:
        yield
    except (pickle.UnpicklingError, EOFError) as error:
        name = getattr(path, "name", path)
        raise ValueError(
            f"Invalid replay buffer file {str(name)!r}: it is truncated or corrupt ({type(error).__name__}: {error})"
        ) from error


class AtomicSaves(BaseAlgorithm):
    """``save()`` through :func:`atomic_write`; a mixin placed before the SB3 class."""

    def save(self, path: PathLike | io.BufferedIOBase, exclude: Any = None, include: Any = None) -> None:
        """Save the model to a zip file (SB3's ``save``); a path is replaced only once the new file is complete.

        :param path: the file (``.zip`` added when the name has no suffix), or an open binary file
        :param exclude: attributes not to save, in addition to the default ones
        :param include: attributes to save that would otherwise be excluded
        """
        with atomic_write(path, "zip") as file:
            super().save(file, exclude, include)


class AtomicReplaySaves(AtomicSaves):
    """``save()`` and ``save_replay_buffer()`` through :func:`atomic_write`, for the algorithms with a replay."""

    def save_replay_buffer(self, path: PathLike | io.BufferedIOBase) -> None:
        """Save the replay buffer as a pickle file (SB3's ``save_replay_buffer``); a path is replaced only once the
        new file is complete.

        :param path: the file (``.pkl`` added when the name has no suffix), or an open binary file
        """
        replay_buffer = getattr(self, "replay_buffer", None)
        if replay_buffer is None:
            raise ValueError(f"{type(self).__name__} has no replay buffer to save yet (it is created by learn())")
        with atomic_write(path, "pkl") as file:
            save_to_pkl(file, replay_buffer, self.verbose)
