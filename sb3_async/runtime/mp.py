"""``backend="mp"``: the workers as processes on this machine, the default backend and the one a Ray host runs too.

:class:`MultiprocessingRuntime` starts one process per :class:`~sb3_async.runtime.base.WorkerSpec` (through
the forkserver, :func:`start_forkserver`), runs each spec's function in it with a
:class:`~sb3_async.runtime.base.WorkerContext` (the worker entry point, ``_worker_main``) and receives what
the workers send.

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
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import torch
import torch.multiprocessing  # noqa: F401  (registers torch's shared-memory reductions for the tensors workers get)

from sb3_async.runtime.base import Runtime, WorkerContext, WorkerSpec, restart_seed
from sb3_async.runtime.processes import Launcher, WorkerError, report_and_exit, watch_parent

_END = "__end__"  # the reader thread's mark that a worker's pipe reached its end (data: the worker's generation)

#: Modules the forkserver imports once, so that each worker starts in a fraction of a second.
_FORKSERVER_PRELOAD = ["torch", "numpy", "gymnasium", "stable_baselines3", "sb3_async.runtime"]


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
    Launcher("forkserver", _FORKSERVER_PRELOAD).forkserver()  # spawns the server and returns: it runs the imports


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


class MultiprocessingRuntime(Runtime):
    """Workers as ``torch.multiprocessing`` processes on this machine (the default backend, ``backend="mp"``).

    A reader thread drains the workers' pipes continuously, so a worker never waits on ``send()`` while the main
    process is busy (a long ``EvalCallback``, a checkpoint): messages queue up in the main process instead.

    :param start_method: ``"forkserver"`` (default, as SB3's ``SubprocVecEnv``), ``"spawn"`` or ``"fork"``
    """

    def __init__(self, start_method: str = "forkserver"):
        self._launcher = Launcher(start_method, _FORKSERVER_PRELOAD)
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
        reader, writer = self._launcher.context.Pipe(duplex=False)
        blob = cloudpickle.dumps((spec.fn, spec.payload))
        proc = self._launcher.process(
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
        self._launcher.stop([self._procs[i]], timeout=1.0)
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
        self._launcher.stop(procs, timeout)
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
