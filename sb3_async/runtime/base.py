"""The runtime's seam: what an algorithm gives the runtime and what its workers get back, for every backend.

An algorithm describes its workers as :class:`WorkerSpec` objects: a module-level function ``fn(ctx, payload)``, the
payload it needs (shipped with cloudpickle, so schedules and env factories may be lambdas) and the shared tensors it
works on (shipped through torch's shared-memory reductions, so every worker sees the same storage). The runtime
starts one process per spec and gives each a :class:`WorkerContext`: its rank and seed, the global step counter, the
stop signal and a pipe to the main process.

The same two shapes serve the whole library:

* gradient-sharing workers (A3C, the async Q family): every spec runs the same loop on shared parameters;
* actors feeding a learner through a replay (Ape-X, AE-DDPG): actor specs send transitions with :meth:`WorkerContext.send`,
  the learner (the main process or a spec of its own) receives them through :meth:`Runtime.poll`.

:class:`Runtime` is the interface the algorithms talk to; its backends are
:class:`~sb3_async.runtime.mp.MultiprocessingRuntime` (``backend="mp"``),
:class:`~sb3_async.runtime.ray_backend.RayRuntime` (``backend="ray"``) and
:class:`~sb3_async.runtime.serial.SerialRuntime` (``backend="serial"``: threads of the main process, for debugging),
chosen by
:func:`~sb3_async.runtime.factory.make_runtime`.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from sb3_async.runtime.heap import TRIM_INTERVAL_SECONDS, release_free_heap
from sb3_async.runtime.processes import StepWatch, StepWatchdog


@dataclass
class WorkerSpec:
    """One worker: ``fn(ctx, payload)`` runs in its own process.

    :param fn: a module-level function (it is pickled by reference)
    :param payload: everything else the worker needs; cloudpickled, so lambdas are fine
    :param shared: tensors shared with the main process and the other workers (same storage, no copy)
    :param name: shown in errors and logs
    :param synced: entries of ``shared`` the workers update in place (parameters, optimizer statistics). Where shared
        memory does not reach every worker (``backend="ray"`` across machines), each machine keeps its own copy and
        the runtime adds every machine's changes to the main process' copy (and theirs to the others')
    :param averaged: entries of ``shared`` the workers update in place that each machine keeps for itself (optimizer
        statistics: a sum of several machines' decays would drive them negative); the main process' copy (saved with
        the model) is the mean of the machines' copies
    :param owned: entries of ``shared`` made of row-per-writer groups (:mod:`~sb3_async.runtime.seqlock`: row
        ``rank + 1`` of each group written by worker ``rank`` alone, row 0 by nobody; the shared normalization
        statistics); across machines each row is copied from its writer's machine to the others
    :param published: entries of ``shared`` only the main process writes and the workers read (Ape-X's parameters);
        the main process calls :meth:`Runtime.publish` after writing one, so that backends without shared memory
        copy it to the workers
    """

    fn: Callable[[WorkerContext, Any], None]
    payload: Any = None
    shared: dict[str, Any] = field(default_factory=dict)
    name: str = "worker"
    synced: tuple[str, ...] = ()
    averaged: tuple[str, ...] = ()
    owned: tuple[str, ...] = ()
    published: tuple[str, ...] = ()


class WorkerContext:
    """What a worker knows about the run. Built by the runtime inside the worker process."""

    def __init__(
        self,
        rank: int,
        name: str,
        n_workers: int,
        base_seed: int,
        steps: torch.Tensor,
        control: torch.Tensor,
        parked: torch.Tensor,
        conn: Connection,
        shared: dict[str, Any],
        start_timesteps: int,
        total_timesteps: int,
    ):
        self.rank, self.name, self.n_workers = rank, name, n_workers
        self.base_seed, self.seed = base_seed, base_seed + rank
        self.shared = shared
        self.start_timesteps, self.total_timesteps = start_timesteps, total_timesteps
        self._steps, self._control, self._parked, self._conn = steps, control, parked, conn
        self._own_steps = int(steps[rank])  # a restarted worker goes on counting from its predecessor's steps
        self._next_trim = time.monotonic() + TRIM_INTERVAL_SECONDS

    @property
    def num_timesteps(self) -> int:
        """Global env steps (all workers, previous ``learn()`` calls included): the paper's shared counter T. The
        last slot of the counter holds the steps of workers this process cannot see (other machines)."""
        return self.start_timesteps + int(self._steps.sum())

    @property
    def progress_remaining(self) -> float:
        """1 at the start of training, 0 at the end: what SB3 schedules take."""
        return max(0.0, 1.0 - self.num_timesteps / max(1, self.total_timesteps))

    @property
    def own_steps(self) -> int:
        """Env steps of this worker (and of the workers it replaced) in this ``learn()`` call."""
        return self._own_steps

    def add_steps(self, n: int) -> int:
        """Count ``n`` env steps of this worker; returns the global count. Each worker writes its own slot: no race."""
        self._own_steps += n
        self._steps[self.rank] = self._own_steps
        return self.num_timesteps

    def should_stop(self) -> bool:
        """True once the main process asked to stop or the step budget is spent.

        Workers call it between updates; it is also where a worker parks while the main process has paused the
        workers (:meth:`Runtime.pause`), so a paused worker holds no half-applied update, and where the worker gives
        its heap's free pages back to the system every few seconds (:mod:`~sb3_async.runtime.heap`).
        """
        now = time.monotonic()
        if now >= self._next_trim:
            self._next_trim = now + TRIM_INTERVAL_SECONDS
            release_free_heap()
        if self._control[1]:
            self._parked[self.rank] = 1
            while self._control[1] and not self._control[0]:
                time.sleep(0.002)
            self._parked[self.rank] = 0
        return bool(self._control[0]) or self.num_timesteps >= self.total_timesteps

    def step_watch(self, timeout: float) -> StepWatch | None:
        """What brackets this worker's env steps so that one stuck past ``timeout`` seconds fails the run: a
        :class:`~sb3_async.runtime.processes.StepWatchdog` in a worker process's main thread (its signal reaches only a
        main thread), None elsewhere. The serial runtime's workers get a clock its main thread reads."""
        if threading.current_thread() is threading.main_thread():
            return StepWatchdog(timeout)
        return None

    def send(self, kind: str, data: Any) -> None:
        """Send a message to the main process (episode statistics, losses, transitions...)."""
        self._conn.send((kind, data))


class Runtime(ABC):
    """Backend seam: the algorithms talk to this interface, never to processes directly."""

    #: Whether the workers run only while the main process polls, taking turns (``backend="serial"``): the main
    #: process's own work then need not be bounded by the clock, and must not be, for runs to repeat
    turn_based: bool = False

    @abstractmethod
    def start(self, specs: Sequence[WorkerSpec], seed: int, start_timesteps: int, total_timesteps: int) -> None:
        """Start one worker per spec; worker ``rank`` is seeded with ``seed + rank``."""

    @abstractmethod
    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        """Messages ``(rank, kind, data)`` received within ``timeout`` seconds. Raises :class:`WorkerError`."""

    @abstractmethod
    def steps(self) -> int:
        """Env steps the workers counted since :meth:`start`."""

    @abstractmethod
    def running(self) -> bool:
        """Whether any worker is still working."""

    @abstractmethod
    def request_stop(self) -> None:
        """Ask every worker to finish (they see :meth:`WorkerContext.should_stop`)."""

    @abstractmethod
    def pause(self, timeout: float = 30.0) -> None:
        """Park every worker at its next :meth:`WorkerContext.should_stop` and return once all are parked (or
        finished). Raises :class:`WorkerError` if a worker dies meanwhile, ``TimeoutError`` after ``timeout``."""

    @abstractmethod
    def resume(self) -> None:
        """Let parked workers go on."""

    @abstractmethod
    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker and release everything. Safe to call twice."""

    def restart(self, rank: int) -> None:
        """Start worker ``rank`` again after :meth:`poll` reported it dead (same spec, fresh seed: see
        :func:`restart_seed`); its step count goes on from its predecessor's. Every backend implements it."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart worker {rank}")

    def local_workers(self) -> int:
        """How many of the started workers run on this machine (0 when unknown): the main process leaves them their
        CPUs (see :func:`sb3_async.common.torch_utils.threads_beside_workers`)."""
        return 0

    def publish(self, name: str) -> None:  # noqa: B027  (a no-op where shared memory reaches every worker)
        """The main process wrote the ``published`` entry ``name`` of the specs: make the workers see it (nothing to
        do with shared memory)."""

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def restart_seed(seed: int, n_workers: int, generation: int) -> int:
    """Base seed of a worker started for the ``generation``-th time (0: the first start). A restarted worker must not
    replay its predecessor's episodes: its base seed moves by ``1000 * n_workers`` per restart, past the env seeds
    (``seed + rank * n_envs``) of every rank for fewer than 1000 envs per worker; kept below 2**31 for NumPy."""
    return (seed + 1000 * n_workers * generation) % 2**31


def worker_seed(seed: int | None) -> int:
    """Base seed for the workers (worker ``rank`` gets ``seed + rank``)."""
    return int(seed) if seed is not None else int(np.random.randint(0, 2**31 - 1 - 1024))
