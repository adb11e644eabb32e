"""The one module that starts processes, for every process sb3_async starts, torch-free. Every start goes through a
:class:`Launcher`, the object that starts, keeps and stops what its owner started: worker processes
(:meth:`Launcher.process`: the algorithms' runtimes and the env pools alike) and their forkserver
(:meth:`Launcher.forkserver`), the benchmark's child interpreters (:meth:`Launcher.command`), a local Ray cluster
(:meth:`Launcher.ray_cluster`) and Ray actors (:meth:`Launcher.actor`: the runtime's hosts and the env pool's). With it,
written once, what supervises them: the start methods, the parent-death watch (:func:`watch_parent`,
:func:`watch_parent_from_env`), the error that names a failed worker (:func:`report_and_exit`, :class:`WorkerError`)
and the stopping (:meth:`Launcher.stop`, :meth:`Launcher.kill`; Ray actors:
:func:`sb3_async.runtime.ray_connect.release_ray`).

They live apart from :mod:`sb3_async.runtime` (which imports torch) so that env workers
(:class:`sb3_async.AsyncEnvPool`) can use them without importing torch.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any, NoReturn, Protocol

__all__ = [
    "EXIT_STUCK",
    "EXIT_UNGUARDED_MAIN",
    "START_METHODS",
    "StepTimeout",
    "StepWatch",
    "StepWatchdog",
    "WorkerError",
    "PARENT_PID_VARIABLE",
    "RAY_NAMESPACE",
    "Launcher",
    "exit_if_importing_main",
    "main_module_importable",
    "report_and_exit",
    "watch_parent",
    "watch_parent_from_env",
]

START_METHODS = ("forkserver", "spawn", "fork")

#: Exit code of a worker whose start re-imported a main script that starts workers again (no ``__main__`` guard).
EXIT_UNGUARDED_MAIN = 86
#: Exit code of a worker whose env stayed stuck in a step past the step timeout without returning to Python.
EXIT_STUCK = 87


class WorkerError(RuntimeError):
    """A worker raised an exception or died. The message names the worker and carries its traceback.

    ``lost`` tells the two apart: True when the worker's process (or the Ray actor running it) was lost without its
    code raising (a signal, a crash, a lost node), False when its code raised (``worker_traceback`` is its traceback).
    """

    def __init__(self, rank: int, name: str, exitcode: int | None, worker_traceback: str | None, lost: bool | None = None):
        self.rank, self.name, self.exitcode, self.worker_traceback = rank, name, exitcode, worker_traceback
        self.lost = worker_traceback is None if lost is None else lost
        if exitcode is not None and exitcode < 0:
            try:
                how = f"was killed by {signal.Signals(-exitcode).name} (exit code {exitcode})"
            except ValueError:
                how = f"died with exit code {exitcode}"
        else:
            how = f"failed with exit code {exitcode}"
        message = f"Worker {rank} ({name}) {how}"
        if worker_traceback:
            raised = worker_traceback.rstrip().rpartition("\n")[2].strip()  # the error itself first, then where
            message += f" ({raised})" if raised and not raised.startswith("File ") else ""
            message += f". Its traceback:\n{worker_traceback}"
        elif exitcode == EXIT_STUCK:
            message += (
                ": one of its envs stayed stuck in a step past step_timeout and did not return to Python to be "
                "interrupted (the message printed above names it)"
            )
        elif exitcode == EXIT_UNGUARDED_MAIN:
            main_file = getattr(sys.modules.get("__main__"), "__file__", None)
            message = (
                f"Worker {rank} ({name}) could not start: with the 'forkserver' and 'spawn' start methods each worker"
                f" imports the main script{f' ({main_file})' if main_file else ''}, and that script started workers"
                ' again (e.g. learn()). Put its code under `if __name__ == "__main__":`, as with SB3\'s SubprocVecEnv.'
            )
        else:
            message += " without a traceback (it did not raise: it was killed or crashed)."
            if exitcode == 1:
                message += (
                    " If it died while starting, see the error printed above: with the 'forkserver' and 'spawn' start"
                    " methods, workers import the main script first."
                )
        super().__init__(message)


def exit_if_importing_main() -> None:
    """In a worker that is still importing the main script (a script without a ``__main__`` guard starts training
    again there), exit quietly with :data:`EXIT_UNGUARDED_MAIN`: the main process then raises one clear
    :class:`WorkerError`, instead of every worker printing multiprocessing's long bootstrapping traceback."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        sys.stdout.flush()
        os._exit(EXIT_UNGUARDED_MAIN)


@contextlib.contextmanager
def main_module_importable(always: bool = False) -> Iterator[None]:
    """Hide a main module ``__file__`` that is not a file (``python - < script.py`` gives ``'<stdin>'``): workers then
    do not try to re-import it, as with ``python -c`` and notebooks (what they need of it travels with cloudpickle).

    :param always: hide it even when it is a file (inside a Ray actor, ``__main__`` is Ray's own worker script)
    """
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if main is None or main_file is None or (os.path.isfile(main_file) and not always):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = main_file


def watch_parent(parent_pid: int, group: bool = False) -> None:
    """Exit this worker as soon as the main process is gone (normal exit, crash or SIGKILL); with ``group``, kill this
    process's whole process group (what a child of :meth:`Launcher.command` started, whatever library started it)."""

    def end() -> NoReturn:
        if group:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    try:
        fd = os.pidfd_open(parent_pid)
    except ProcessLookupError:
        end()
    except (AttributeError, OSError):
        fd = None

    def run() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(0.5)
                try:
                    os.kill(parent_pid, 0)
                except ProcessLookupError:
                    break
        end()

    threading.Thread(target=run, name="sb3_async-parent-watch", daemon=True).start()


def watch_parent_from_env() -> None:
    """In a child of :meth:`Launcher.command`: when the process that started it is gone, kill this process's group (this
    process and what it started). Does nothing in a process started otherwise."""
    parent = os.environ.get(PARENT_PID_VARIABLE)
    if parent:
        watch_parent(int(parent), group=True)


class StepTimeout(TimeoutError):
    """An env's step ran past the step timeout; raised inside that step, in the worker's main thread."""


class StepWatch(Protocol):
    """What brackets a worker's env steps for its step timeout: :class:`StepWatchdog` in a worker process,
    the serial runtime's clock in a worker thread (:mod:`sb3_async.runtime.serial`)."""

    def begin(self, label: str) -> None: ...

    def end(self) -> None: ...

    def stop(self) -> None: ...


class StepWatchdog:
    """Interrupts an env step that runs past ``timeout`` seconds in this process's main thread (a worker's).

    The worker brackets each step with :meth:`begin` and :meth:`end` (two attribute writes). A thread looks once a
    second: past the timeout it sends ``SIGUSR2`` to the main thread, whose handler raises :class:`StepTimeout` there,
    naming the env and how long it has been stuck, so the worker reports it with the traceback of where it was stuck;
    a step that does not return to Python within :attr:`GRACE` more seconds (stuck in native code) ends the process
    with :data:`EXIT_STUCK` after printing the same message. Build it in the main thread.
    """

    #: Seconds a step may stay stuck after the interrupt before the process exits.
    GRACE = 10.0

    def __init__(self, timeout: float):
        self.timeout = float(timeout)
        self._label: str | None = None
        self._count = 0  # steps begun: the watching thread tells one long step from many short ones by it
        self._stuck_since = 0.0
        self._stopped = threading.Event()
        signal.signal(signal.SIGUSR2, self._interrupt)
        threading.Thread(target=self._watch, name="sb3_async-step-watchdog", daemon=True).start()

    def stop(self) -> None:
        """End the watching thread (the envs it watched are closed)."""
        self._stopped.set()

    def begin(self, label: str) -> None:
        """A step of the env ``label`` (e.g. ``"Env 3 (worker 1, a3c-1)"``) starts."""
        self._count += 1
        self._label = label

    def end(self) -> None:
        """The step returned."""
        self._label = None

    def _message(self, label: str) -> str:
        stuck = time.monotonic() - self._stuck_since
        return f"{label} has been stuck in a step for {stuck:.0f} s (step_timeout={self.timeout:g} s)"

    def _interrupt(self, signum: int, frame: Any) -> None:
        label = self._label
        if label is not None:
            raise StepTimeout(self._message(label))

    def _watch(self) -> None:
        main, tick = threading.main_thread().ident, min(1.0, self.timeout / 4)
        seen, interrupted = -1, -1
        while not self._stopped.wait(tick):
            count, label, now = self._count, self._label, time.monotonic()
            if count != seen or label is None:  # another step since the last look, or none running
                seen, self._stuck_since = count, now - tick / 2  # the step began within the last tick
                continue
            stuck = now - self._stuck_since
            if stuck > self.timeout and interrupted != count:
                interrupted = count
                signal.pthread_kill(main, signal.SIGUSR2)  # type: ignore[arg-type]
            elif stuck > self.timeout + self.GRACE and interrupted == count:
                print(self._message(label), file=sys.stderr, flush=True)
                os._exit(EXIT_STUCK)


def report_and_exit(conn: Connection, kind: str) -> NoReturn:
    """Send the exception being handled to the main process as ``(kind, its traceback)``, then end this worker."""
    try:
        conn.send((kind, traceback.format_exc()))
    finally:
        conn.close()
        os._exit(1)


#: Set in a child interpreter of :meth:`Launcher.command`: the process id of the process that started it.
PARENT_PID_VARIABLE = "SB3_ASYNC_PARENT_PID"

#: The Ray namespace of every actor sb3_async starts (:meth:`Launcher.actor`)
RAY_NAMESPACE = "sb3_async"

_REMOTE_CLASSES: dict[type, Any] = {}


class Launcher:
    """The one object through which sb3_async starts a process, and which stops it: each owner (an algorithm's
    runtime, an env pool's workers, the benchmark's runner, a set of Ray hosts) holds one, starts through it and
    closes it when done; what it started and has not stopped is in :attr:`processes` and :attr:`commands`.

    :param start_method: ``"forkserver"``, ``"spawn"`` or ``"fork"`` for :meth:`process` (checked here, once)
    :param preload: modules the forkserver imports once for all its children
    """

    def __init__(self, start_method: str = "forkserver", preload: Sequence[str] = ()):
        if start_method not in START_METHODS:
            raise ValueError(f"Invalid start_method={start_method!r}: expected one of {', '.join(START_METHODS)}")
        self.start_method = start_method
        #: The multiprocessing context of :meth:`process` (its ``Pipe`` makes the workers' pipes)
        self.context: Any = multiprocessing.get_context(start_method)
        if start_method == "forkserver" and preload:
            self.context.set_forkserver_preload(list(preload))
        #: Worker processes started by :meth:`process` and not stopped yet
        self.processes: list[Any] = []
        #: Child interpreters started by :meth:`command` and not killed yet
        self.commands: list[subprocess.Popen[str]] = []

    def process(self, target: Any, name: str, args: tuple[Any, ...]) -> Any:
        """Start ``target(*args)`` in a new daemonic process. An unguarded main script being re-imported by a worker
        exits quietly here (:func:`exit_if_importing_main`); a main module that is not a file is not re-imported by the
        child (:func:`main_module_importable`). The target is expected to call :func:`watch_parent` first and to report
        with :func:`report_and_exit`; :meth:`stop` stops it."""
        exit_if_importing_main()
        proc = self.context.Process(target=target, name=name, args=args, daemon=True)
        with main_module_importable():
            proc.start()
        self.processes.append(proc)
        return proc

    def command(self, command: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``command``, another Python interpreter (a benchmark run, or a peer's adapter under its own virtual
        environment), in a process group of its own, its output (stderr included) piped as text. The child is expected
        to call :func:`watch_parent_from_env` first, so that it and everything it started end with this process, even
        when this one is killed; :meth:`kill` stops them earlier.

        :param env: the child's environment variables (default: this process's); :data:`PARENT_PID_VARIABLE` is added
        """
        variables = {**(os.environ if env is None else env), PARENT_PID_VARIABLE: str(os.getpid())}
        process = subprocess.Popen(
            list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=variables, start_new_session=True
        )
        self.commands.append(process)
        return process

    def forkserver(self) -> None:
        """Start this program's forkserver now, in the background, if none runs yet (it imports the launcher's
        ``preload`` once; the workers :meth:`process` starts later fork from it)."""
        if self.start_method != "forkserver":
            raise ValueError(f"A forkserver needs start_method='forkserver', not {self.start_method!r}")
        multiprocessing.forkserver.ensure_running()

    @staticmethod
    def ray_cluster(ray: Any, **init_kwargs: Any) -> None:
        """Connect to a Ray cluster, or start a local one (``address="local"``): ``ray.init(**init_kwargs)``, the one
        place sb3_async starts Ray's processes; :func:`sb3_async.runtime.ray_connect.release_ray` shuts it down."""
        ray.init(**init_kwargs)

    @staticmethod
    def actor(ray: Any, cls: type, name: str, num_cpus: float, *args: Any) -> Any:
        """Start one Ray actor of ``cls``: named ``name`` in the :data:`RAY_NAMESPACE` namespace (so
        :func:`sb3_async.runtime.ray_connect.release_ray` finds it and kills it), owned by this driver (Ray ends it
        when the driver dies), spread over the cluster's nodes, asking for ``num_cpus``, and never restarted by Ray
        (restarts are the caller's: it knows which seeds and envs to start again).

        :param ray: the ``ray`` module (this module does not import Ray)
        :return: the actor's handle
        """
        remote = _REMOTE_CLASSES.get(cls)
        if remote is None:
            remote = _REMOTE_CLASSES[cls] = ray.remote(cls)
        return remote.options(
            name=name, namespace=RAY_NAMESPACE, num_cpus=num_cpus, scheduling_strategy="SPREAD", max_restarts=0
        ).remote(*args)

    def stop(self, procs: Sequence[Any] | None = None, timeout: float = 5.0) -> None:
        """Wait up to ``timeout`` seconds in all for ``procs`` (default: every process started and not stopped yet) to
        exit, then SIGTERM, then SIGKILL those still alive."""
        procs = list(self.processes if procs is None else procs)
        deadline = time.monotonic() + timeout
        for proc in procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=1.0)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1.0)
        self.processes = [proc for proc in self.processes if all(proc is not other for other in procs)]

    def kill(self, command: subprocess.Popen[Any]) -> None:
        """SIGKILL a child of :meth:`command` and every process in its group (its workers, a forkserver)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(command.pid, signal.SIGKILL)
        self.commands = [other for other in self.commands if other is not command]

    def close(self, timeout: float = 5.0) -> None:
        """Stop every process and kill every command this launcher started and has not stopped."""
        self.stop(timeout=timeout)
        for command in list(self.commands):
            self.kill(command)
