"""The worker side of :class:`~sb3_async.common.env_pool.AsyncEnvPool`: what runs where the envs live.

- :class:`SharedObs`: every env's observation slot, in one shared mapping of an anonymous file (``memfd``: nothing is
  ever named in ``/dev/shm``);
- :class:`EnvWorker`: a group of envs and the commands it serves (``step``, ``reset``, ``call``), with the same-step
  autoreset (:data:`FINAL_OBS`, :data:`FINAL_INFO`) and the ``on_error`` handling;
- :func:`env_worker_main`: the entry point of an env worker process.

The same :class:`EnvWorker` serves the envs the pool keeps in its own process, its worker processes and its Ray hosts
(:mod:`sb3_async.common.runtime.ray_env`); :mod:`sb3_async.common.envpool_engine` answers the same commands. This
module does not import torch, so neither do the env workers.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import tempfile
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_async.common.runtime.processes import report_and_exit, watch_parent

__all__ = ["FINAL_INFO", "FINAL_OBS", "EnvFactory", "EnvWorker", "Missing", "SharedObs", "env_worker_main"]

EnvFactory = Callable[[], gym.Env]
#: Keys the same-step autoreset adds to an ended env's info (gymnasium 1.x's names for its same-step vector mode).
FINAL_OBS, FINAL_INFO = "final_obs", "final_info"


# ----------------------------------------------------------------------------------------------------------------------
# Shared observation slots


def _obs_leaves(space: spaces.Space) -> list[tuple[Any, tuple[int, ...], np.dtype]]:
    """``(key, shape, dtype)`` of each array of an observation: ``key`` None for a plain space, the Dict key or the
    Tuple index otherwise (the spaces SB3's VecEnvs support)."""
    if isinstance(space, spaces.Dict):
        items: Iterable[tuple[Any, spaces.Space]] = space.spaces.items()
    elif isinstance(space, spaces.Tuple):
        items = enumerate(space.spaces)
    else:
        items = [(None, space)]
    leaves = []
    for key, sub in items:
        if not isinstance(sub, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
            raise TypeError(
                f"AsyncEnvPool supports Box, Discrete, MultiDiscrete and MultiBinary observations (alone or in a Dict or"
                f" Tuple), as SB3's VecEnvs do; got {sub}"
            )
        leaves.append((key, tuple(sub.shape or ()), np.dtype(sub.dtype)))
    return leaves


def _anonymous_fd(size: int) -> int:
    """A file descriptor of ``size`` zeroed bytes with no name anywhere, so nothing can leak into /dev/shm."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("sb3_async-env-pool", os.MFD_CLOEXEC)
    else:  # pragma: no cover - macOS: an unlinked temporary file
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    os.ftruncate(fd, size)
    return fd


class SharedObs:
    """The observation slot of every env, in one shared mapping of an anonymous file.

    :param space: the observation space of one env
    :param n_envs: number of slots
    :param fd: an existing mapping's file descriptor (in a worker); None creates one
    """

    def __init__(self, space: spaces.Space, n_envs: int, fd: int | None = None):
        self.space, self.n_envs = space, n_envs
        self.leaves = _obs_leaves(space)
        offsets, size = [], 0
        for _, shape, dtype in self.leaves:
            size = -(-size // 64) * 64  # 64-byte alignment for every array
            offsets.append(size)
            size += n_envs * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(size, 1)
        self.fd = _anonymous_fd(size) if fd is None else fd
        self._mmap = mmap.mmap(self.fd, size)
        self.arrays = {
            key: np.ndarray((n_envs, *shape), dtype=dtype, buffer=self._mmap, offset=offset)
            for (key, shape, dtype), offset in zip(self.leaves, offsets)
        }

    def write(self, index: int | Sequence[int], obs: Any) -> None:
        """Write ``obs`` into slot ``index`` (or a batch of observations into the slots ``index``)."""
        for key, array in self.arrays.items():
            array[index] = obs if key is None else obs[key]

    def read(self, indices: int | Sequence[int] | slice) -> Any:
        """A copy of the observations at ``indices`` (the slots are rewritten by the next step)."""
        if isinstance(indices, (int, slice)):  # views: copy them
            arrays = {key: array[indices].copy() for key, array in self.arrays.items()}
        else:  # fancy indexing copies already
            arrays = {key: array[indices] for key, array in self.arrays.items()}
        if isinstance(self.space, spaces.Dict):
            return arrays
        if isinstance(self.space, spaces.Tuple):
            return tuple(arrays.values())
        return arrays[None]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the memory goes once every process has unmapped it
            self.fd = -1


# ----------------------------------------------------------------------------------------------------------------------
# Worker side


class EnvWorker:
    """The envs of one worker process and the commands it serves."""

    def __init__(self, ids: list[int], factories: list[EnvFactory], autoreset: bool, on_error: str):
        self.ids, self.factories = ids, dict(zip(ids, factories))
        self.autoreset, self.on_error = autoreset, on_error
        self.envs = {i: factories[k]() for k, i in enumerate(ids)}
        self.obs: SharedObs | None = None

    @property
    def spaces(self) -> list[tuple[int, spaces.Space, spaces.Space]]:
        return [(i, env.observation_space, env.action_space) for i, env in self.envs.items()]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()

    def rebuild(self, i: int) -> None:
        with contextlib.suppress(Exception):  # the env is broken already: its replacement matters, not its close()
            self.envs[i].close()
        self.envs[i] = self.factories[i]()

    def restarted(self, i: int, error: str) -> tuple[int, float, bool, bool, dict[str, Any]]:
        """The step result of an env rebuilt after ``error``: its episode ends truncated, the error in its info."""
        assert self.obs is not None
        final_obs = self.obs.read(i)  # the slot still holds the last observation the env gave
        if not self.autoreset:
            return i, 0.0, False, True, {"error": error}
        obs, reset_info = self.envs[i].reset()
        self.obs.write(i, obs)
        return i, 0.0, False, True, {**reset_info, FINAL_OBS: final_obs, FINAL_INFO: {}, "error": error}

    def step(self, items: list[tuple[int, Any, str | None]]) -> tuple[list[tuple], dict[int, str]]:
        assert self.obs is not None
        results, errors = [], {}
        for i, action, restart_error in items:
            if restart_error is not None:  # this env was rebuilt with a respawned process: no action to take
                results.append(self.restarted(i, restart_error))
                continue
            env = self.envs[i]
            try:
                obs, reward, terminated, truncated, info = env.step(action)
                if self.autoreset and (terminated or truncated):
                    final_obs, final_info = obs, info
                    obs, info = env.reset()
                    info = {**info, FINAL_OBS: final_obs, FINAL_INFO: final_info}
                self.obs.write(i, obs)
                results.append((i, float(reward), bool(terminated), bool(truncated), info))
            except Exception:
                error = traceback.format_exc()
                if self.on_error == "raise":
                    errors[i] = error
                    continue
                try:
                    self.rebuild(i)
                    results.append(self.restarted(i, error))
                except Exception:
                    errors[i] = f"{error}\nRebuilding the env then failed:\n{traceback.format_exc()}"
        return results, errors

    def reset(self, items: list[tuple[int, int | None, dict[str, Any] | None]]) -> tuple[list[tuple], dict[int, str]]:
        assert self.obs is not None
        results, errors = [], {}
        for i, seed, options in items:
            for attempt in range(2 if self.on_error == "restart" else 1):
                try:
                    obs, info = self.envs[i].reset(seed=seed, options=options)
                    self.obs.write(i, obs)
                    results.append((i, info))
                    break
                except Exception:
                    errors[i] = traceback.format_exc()
                    if attempt == 0 and self.on_error == "restart":
                        try:
                            self.rebuild(i)
                        except Exception:
                            errors[i] += f"\nRebuilding the env then failed:\n{traceback.format_exc()}"
                            break
            else:
                continue
            errors.pop(i, None)
        return results, errors

    def call(self, ids: list[int], what: str, name: str, args: tuple, kwargs: dict) -> tuple[list[Any], dict[int, str]]:
        values, errors = [], {}
        for i in ids:
            env = self.envs[i]
            try:
                if what == "get_attr":
                    values.append(env.get_wrapper_attr(name))
                elif what == "has_attr":
                    try:
                        env.get_wrapper_attr(name)
                        values.append(True)
                    except AttributeError:
                        values.append(False)
                elif what == "set_attr":
                    env.set_wrapper_attr(name, args[0])
                    values.append(None)
                elif what == "is_wrapped":
                    values.append(_is_wrapped(env, args[0]))
                elif what == "render":
                    values.append(env.render())
                else:
                    values.append(env.get_wrapper_attr(name)(*args, **kwargs))
            except AttributeError as error:
                if what == "get_attr":  # the parent raises AttributeError, as VecEnv callers expect
                    values.append(Missing(str(error)))
                else:
                    errors[i] = traceback.format_exc()
            except Exception:
                errors[i] = traceback.format_exc()
        return values, errors


@dataclass
class Missing:
    """A ``get_attr`` of an attribute the env does not have (raised as ``AttributeError`` in the main process)."""

    message: str


def _is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


def env_worker_main(
    index: int,
    ids: list[int],
    factories_blob: bytes,
    conn: Connection,
    parent_pid: int,
    autoreset: bool,
    on_error: str,
) -> None:
    """Entry point of an env worker process: build the envs, report their spaces, map the observation slots, serve."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle; it closes the pool
    watch_parent(parent_pid)
    try:
        worker = EnvWorker(ids, cloudpickle.loads(factories_blob), autoreset, on_error)
        conn.send(("spaces", worker.spaces))
        fd = reduction.recv_handle(conn)
        worker.obs = SharedObs(worker.envs[ids[0]].observation_space, conn.recv(), fd)
        while True:
            command, data = conn.recv()
            if command == "step":
                conn.send(("step", worker.step(data)))
            elif command == "reset":
                conn.send(("reset", worker.reset(data)))
            elif command == "call":
                conn.send(("call", worker.call(*data)))
            elif command == "close":
                worker.close()
                conn.send(("closed", None))
                break
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the main process is gone or closed the pipe: nothing to report to
    except BaseException:
        report_and_exit(conn, "fatal")
    conn.close()
