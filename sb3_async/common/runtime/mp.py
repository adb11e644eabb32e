"""Worker lifecycle for every sb3_async algorithm: start, supervise, stop. Written once, used by all.

An algorithm describes its workers as :class:`WorkerSpec` objects: a module-level function ``fn(ctx, payload)``, the
payload it needs (shipped with cloudpickle, so schedules and env factories may be lambdas) and the shared tensors it
works on (shipped through torch's shared-memory reductions, so every worker sees the same storage). The runtime
starts one process per spec and gives each a :class:`WorkerContext`: its rank and seed, the global step counter, the
stop signal and a pipe to the main process.

The same two shapes serve the whole library:

* gradient-sharing workers (A3C, the async Q family): every spec runs the same loop on shared parameters;
* actors feeding a learner through a replay (Ape-X, AE-DDPG): actor specs send transitions with :meth:`WorkerContext.send`,
  the learner (the main process or a spec of its own) receives them through :meth:`Runtime.poll`.

Guarantees, each covered by a test:

* workers run on CPU with ``torch.set_num_threads(1)``, ignore Ctrl-C (the main process stops them in order) and exit
  by themselves within a second when the main process dies, even from SIGKILL (a ``pidfd`` watch on the parent);
* nothing named is left in ``/dev/shm``: tensors use torch's ``file_descriptor`` strategy and the control block is a
  tensor, not a semaphore;
* a worker that raises or dies makes :meth:`Runtime.poll` raise :class:`WorkerError` naming the worker, its exit code
  and its traceback; reads never block without a timeout.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import queue
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reductions for the tensors workers get)

from sb3_async.common.runtime.processes import (
    EXIT_UNGUARDED_MAIN,
    WorkerError,
    process_context,
    report_and_exit,
    start_process,
    stop_processes,
    watch_parent,
)

BACKENDS = ("mp", "ray")

_END = "__end__"  # the reader thread's mark that a worker's pipe reached its end (data: the worker's generation)

#: Modules the forkserver imports once, so that each worker starts in a fraction of a second.
_FORKSERVER_PRELOAD = ["torch", "numpy", "gymnasium", "stable_baselines3", "sb3_async.common.runtime"]


def start_forkserver() -> None:
    """Start this program's forkserver now, in the background, if none runs yet.

    The forkserver imports ``_FORKSERVER_PRELOAD`` once, which takes about a second of one core (mostly torch). A model
    calls this when it is built with an env, so that the import runs while the rest of the model is being built (the
    first torch optimizer alone imports ``torch._dynamo``, about a second as well). The first ``learn()`` then finds the
    forkserver ready, and its workers step within a fraction of a second. SB3's ``SubprocVecEnv`` also starts its
    processes when it is built.

    Nothing is done in a process that is itself a child (a worker building a model starts the forkserver lazily, if
    at all; a worker importing a main script without a ``__main__`` guard exits at its first ``learn()``), or where the
    platform has no forkserver.
    """
    if (
        multiprocessing.parent_process() is not None
        or getattr(multiprocessing.current_process(), "_inheriting", False)  # a worker importing an unguarded script
        or "forkserver" not in multiprocessing.get_all_start_methods()
    ):
        return
    process_context("forkserver", _FORKSERVER_PRELOAD)
    multiprocessing.forkserver.ensure_running()  # spawns the server and returns: the imports run in the server


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
    :param owned: entries of ``shared`` made of row-per-writer groups (:mod:`~sb3_async.common.runtime.seqlock`: row
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

    @property
    def num_timesteps(self) -> int:
        """Global env steps (all workers, previous ``learn()`` calls included): the paper's shared counter T. The
        last slot of the counter holds the steps of workers this process cannot see (other machines)."""
        return self.start_timesteps + int(self._steps.sum())

    @property
    def progress_remaining(self) -> float:
        """1 at the start of training, 0 at the end: what SB3 schedules take."""
        return max(0.0, 1.0 - self.num_timesteps / max(1, self.total_timesteps))

    def add_steps(self, n: int) -> int:
        """Count ``n`` env steps of this worker; returns the global count. Each worker writes its own slot: no race."""
        self._own_steps += n
        self._steps[self.rank] = self._own_steps
        return self.num_timesteps

    def should_stop(self) -> bool:
        """True once the main process asked to stop or the step budget is spent.

        Workers call it between updates; it is also where a worker parks while the main process has paused the
        workers (:meth:`Runtime.pause`), so a paused worker holds no half-applied update.
        """
        if self._control[1]:
            self._parked[self.rank] = 1
            while self._control[1] and not self._control[0]:
                time.sleep(0.002)
            self._parked[self.rank] = 0
        return bool(self._control[0]) or self.num_timesteps >= self.total_timesteps

    def send(self, kind: str, data: Any) -> None:
        """Send a message to the main process (episode statistics, losses, transitions...)."""
        self._conn.send((kind, data))


def _worker_main(
    rank: int,
    name: str,
    n_workers: int,
    base_seed: int,
    parent_pid: int,
    fn_and_payload: bytes,
    shared: dict[str, Any],
    steps: torch.Tensor,
    control: torch.Tensor,
    parked: torch.Tensor,
    conn: Connection,
    start_timesteps: int,
    total_timesteps: int,
) -> None:
    """Entry point of every worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(parent_pid)
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)  # per-step argument checks cost more than the net
    ctx = WorkerContext(
        rank, name, n_workers, base_seed, steps, control, parked, conn, shared, start_timesteps, total_timesteps
    )
    try:
        fn, payload = cloudpickle.loads(fn_and_payload)
        from stable_baselines3.common.utils import set_random_seed

        set_random_seed(ctx.seed)
        fn(ctx, payload)
        conn.send(("done", None))
    except BaseException:
        report_and_exit(conn, "error")
    conn.close()


class Runtime(ABC):
    """Backend seam: the algorithms talk to this interface, never to processes directly."""

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
        :func:`restart_seed`); its step count goes on from its predecessor's. Both backends implement it."""
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


class MultiprocessingRuntime(Runtime):
    """Workers as ``torch.multiprocessing`` processes on this machine (the default backend, ``backend="mp"``).

    A reader thread drains the workers' pipes continuously, so a worker never waits on ``send()`` while the main
    process is busy (a long ``EvalCallback``, a checkpoint): messages queue up in the main process instead.

    :param start_method: ``"forkserver"`` (default, as SB3's ``SubprocVecEnv``), ``"spawn"`` or ``"fork"``
    """

    def __init__(self, start_method: str = "forkserver"):
        self._ctx: Any = process_context(start_method, _FORKSERVER_PRELOAD)
        self.start_method = start_method
        self._specs: list[WorkerSpec] = []
        self._ranks: list[int] = []  # global rank of each local worker
        self._index: dict[int, int] = {}  # global rank -> local index
        self._generations: list[int] = []
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._finished: list[bool] = []
        self._tracebacks: dict[int, str] = {}
        self._inbox: queue.SimpleQueue[tuple[int, str, Any]] = queue.SimpleQueue()
        # Messages taken from the inbox and not yet returned by poll(): the one list they wait in (pause() and a
        # dead worker's wait add to it, poll() hands it over and starts a new one, so each message leaves once).
        self._held: list[tuple[int, str, Any]] = []
        self._ended: list[bool] = []  # whether each local worker's pipe reached its end (all it sent was taken)
        self._reader: threading.Thread | None = None
        self._reading = threading.Event()
        self._open_conns: dict[Any, tuple[int, int]] = {}  # pipe -> (rank, generation)
        self._conns_lock = threading.Lock()
        self._steps = torch.zeros(1, dtype=torch.int64)
        self._control = torch.zeros(2, dtype=torch.int64)  # [stop, pause]
        self._parked = torch.zeros(0, dtype=torch.int64)
        self._run: tuple[int, int, int, int] = (0, 0, 0, 0)  # seed, start_timesteps, total_timesteps, n_total
        self._closed = False

    def start(
        self,
        specs: Sequence[WorkerSpec],
        seed: int,
        start_timesteps: int,
        total_timesteps: int,
        ranks: Sequence[int] | None = None,
        n_total: int | None = None,
    ) -> None:
        """Start one worker per spec. ``ranks`` / ``n_total`` (default: ``0..len(specs)-1`` of ``len(specs)``) let a
        process run a part of a larger set of workers (the Ray backend's one runtime per machine)."""
        if not specs:
            raise ValueError("At least one worker spec is needed")
        self._ranks = list(range(len(specs)) if ranks is None else ranks)
        n_total = len(specs) if n_total is None else n_total
        if len(self._ranks) != len(specs) or not all(0 <= rank < n_total for rank in self._ranks):
            raise ValueError(f"Invalid ranks={ranks!r}: expected one rank in [0, {n_total}) per spec")
        self._index = {rank: i for i, rank in enumerate(self._ranks)}
        self._specs = list(specs)
        self._run = (seed, start_timesteps, total_timesteps, n_total)
        # One step slot per worker, plus one for the steps of workers elsewhere (set_steps_elsewhere).
        self._steps = torch.zeros(n_total + 1, dtype=torch.int64).share_memory_()
        self._control = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._parked = torch.zeros(n_total, dtype=torch.int64).share_memory_()
        self._finished = [False] * len(specs)
        self._ended = [False] * len(specs)
        self._generations = [0] * len(specs)
        self._procs = [None] * len(specs)
        self._conns = [None] * len(specs)  # type: ignore[list-item]
        try:
            for i in range(len(specs)):
                self._start_process(i)
        except BaseException:
            self.close()
            raise
        self._reading.set()
        self._reader = threading.Thread(target=self._read_loop, name="sb3_async-reader", daemon=True)
        self._reader.start()

    def _start_process(self, i: int) -> None:
        seed, start_timesteps, total_timesteps, n_total = self._run
        spec, rank = self._specs[i], self._ranks[i]
        reader, writer = self._ctx.Pipe(duplex=False)
        blob = cloudpickle.dumps((spec.fn, spec.payload))
        proc = start_process(
            self._ctx,
            _worker_main,
            f"sb3_async-{spec.name}",
            (
                rank,
                spec.name,
                n_total,
                restart_seed(seed, n_total, self._generations[i]),
                os.getpid(),
                blob,
                spec.shared,
                self._steps,
                self._control,
                self._parked,
                writer,
                start_timesteps,
                total_timesteps,
            ),
        )
        writer.close()
        self._procs[i], self._conns[i] = proc, reader
        with self._conns_lock:
            self._open_conns[reader] = (rank, self._generations[i])

    def _read_loop(self) -> None:
        while self._reading.is_set():
            with self._conns_lock:
                open_conns = dict(self._open_conns)
            if not open_conns:
                time.sleep(0.05)  # every worker is gone; a restarted one adds its pipe
                continue
            ready: list[Any] = wait(list(open_conns), timeout=0.1)
            for conn in ready:
                rank, generation = open_conns[conn]
                try:
                    message: tuple[str, Any] = conn.recv()
                except (EOFError, OSError):
                    with self._conns_lock:
                        self._open_conns.pop(conn, None)
                    # After the worker's last message in the inbox: once this is taken, nothing more can come from it.
                    self._inbox.put((rank, _END, generation))
                    continue
                self._inbox.put((rank, *message))

    def local_workers(self) -> int:
        return len(self._specs)

    def steps(self) -> int:
        return int(self._steps[self._ranks].sum()) if self._ranks else 0

    def set_steps_elsewhere(self, steps: int) -> None:
        """Steps of workers this runtime does not run (other machines): part of every worker's ``num_timesteps``."""
        self._steps[-1] = steps

    def running(self) -> bool:
        return not all(self._finished)

    def request_stop(self) -> None:
        self._control[0] = 1

    def pause(self, timeout: float = 30.0) -> None:
        self._control[1] = 1
        deadline = time.monotonic() + timeout
        while True:
            self._take(0.0)
            self._check_health()
            if self.parked():
                return
            if time.monotonic() > deadline:
                self.resume()
                raise TimeoutError(f"The workers did not pause within {timeout} s")
            time.sleep(0.002)

    def parked(self) -> bool:
        """Whether every worker is parked (after :meth:`pause` was asked) or finished."""
        return all(bool(self._parked[rank]) or finished for rank, finished in zip(self._ranks, self._finished))

    def set_pause(self, paused: bool) -> None:
        """Ask the workers to park (True) or go on (False) without waiting (:meth:`pause` waits)."""
        self._control[1] = int(paused)

    def resume(self) -> None:
        self._control[1] = 0

    def _take(self, timeout: float) -> None:
        """Move the inbox into ``_held`` (waiting up to ``timeout`` for the first message); errors, ends and the ends
        of pipes are recorded instead of held."""
        items = []
        if timeout > 0:
            try:
                items.append(self._inbox.get(timeout=timeout))
            except queue.Empty:
                return
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        for rank, kind, data in items:
            if kind == "error":
                self._tracebacks[rank] = data
            elif kind == "done":
                self._finished[self._index[rank]] = True
            elif kind == _END:
                i = self._index[rank]
                self._ended[i] = self._ended[i] or data == self._generations[i]
            else:
                self._held.append((rank, kind, data))

    def _check_health(self) -> None:
        for i, proc in enumerate(self._procs):
            rank = self._ranks[i]
            failed = rank in self._tracebacks
            if not failed and proc.is_alive():
                continue
            # Dead or failed: take everything it sent before it ended (its last messages, its traceback). Its pipe
            # ends as soon as the process is gone; the deadline only covers a pipe that another process keeps open.
            deadline = time.monotonic() + 2.0
            while not self._ended[i] and time.monotonic() < deadline:
                self._take(0.02)
            proc.join(timeout=2.0)
            if not failed and proc.exitcode == 0:
                self._finished[i] = True
                continue
            raise WorkerError(rank, self._specs[i].name, proc.exitcode, self._tracebacks.get(rank))

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        self._take(timeout)
        self._check_health()  # on a WorkerError the messages stay held: the next poll returns them
        out, self._held = self._held, []
        return out

    def restart(self, rank: int) -> None:
        if rank not in self._index:
            raise ValueError(f"Invalid rank={rank!r}: this runtime runs workers {self._ranks}")
        i = self._index[rank]
        stop_processes([self._procs[i]], timeout=1.0)
        with self._conns_lock:
            self._open_conns.pop(self._conns[i], None)
        self._conns[i].close()
        self._procs[i].close()
        self._tracebacks.pop(rank, None)
        self._finished[i] = self._ended[i] = False
        self._parked[rank] = 0
        self._generations[i] += 1
        self._start_process(i)

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.request_stop()
        procs = [proc for proc in self._procs if proc is not None]
        # The reader thread keeps draining meanwhile, so a worker blocked on send() can finish.
        stop_processes(procs, timeout)
        self._reading.clear()
        if self._reader is not None:
            self._reader.join(timeout=1.0)
        for conn in self._conns:
            if conn is not None:
                conn.close()
        for proc in procs:
            if not proc.is_alive():
                proc.close()
        self._procs, self._conns = [], []


def restart_seed(seed: int, n_workers: int, generation: int) -> int:
    """Base seed of a worker started for the ``generation``-th time (0: the first start). A restarted worker must not
    replay its predecessor's episodes: its base seed moves by ``1000 * n_workers`` per restart, past the env seeds
    (``seed + rank * n_envs``) of every rank for fewer than 1000 envs per worker; kept below 2**31 for NumPy."""
    return (seed + 1000 * n_workers * generation) % 2**31


def make_runtime(backend: str, start_method: str, backend_kwargs: dict[str, Any] | None = None) -> Runtime:
    """The runtime for ``backend``: ``"mp"`` (:class:`MultiprocessingRuntime`) or ``"ray"``
    (:class:`~sb3_async.common.runtime.ray_backend.RayRuntime`, its options in ``backend_kwargs``)."""
    backend_kwargs = dict(backend_kwargs or {})
    if backend == "mp":
        if backend_kwargs:
            raise ValueError(f"Invalid backend_kwargs={backend_kwargs!r}: backend='mp' takes none")
        return MultiprocessingRuntime(start_method)
    if backend == "ray":
        from sb3_async.common.runtime.ray_backend import RayRuntime  # Ray is optional: imported only when asked for

        return RayRuntime(start_method=start_method, **backend_kwargs)
    raise ValueError(f"Invalid backend={backend!r}: expected one of {', '.join(BACKENDS)}")


def worker_seed(seed: int | None) -> int:
    """Base seed for the workers (worker ``rank`` gets ``seed + rank``)."""
    return int(seed) if seed is not None else int(np.random.randint(0, 2**31 - 1 - 1024))
