"""``backend="serial"``: every worker in the caller's process, one after another, for debugging.

:class:`SerialRuntime` runs each :class:`~sb3_async.runtime.base.WorkerSpec`'s function in a thread of this process,
but only one thread runs at any time. A baton decides whose turn it is: :meth:`SerialRuntime.poll` hands it to each
live worker in rank order; a worker runs until its next :meth:`WorkerContext.should_stop` (one segment, one update,
one actor step) and hands it back. Nothing starts a process.

What this gives:

* ``breakpoint()`` in an env, a policy or a worker function stops this process' terminal, a profiler of this process
  sees every worker (one thread each), and a crash shows up as a :class:`~sb3_async.runtime.processes.WorkerError`
  with its traceback, as with the other backends;
* the workers take turns in a fixed order, each with its own random streams (Python's, NumPy's and torch's global
  generators, seeded with the worker's seed at its first turn and set aside between its turns, as if it had a process
  of its own): with a seed, two runs compute the same thing, bit for bit, as long as the main process' own work does
  not depend on time (Ape-X's learner works ~20 ms between two polls; with ``replay_ratio``, in turn-based runs, it
  learns until the ratio is reached instead).

The main thread watches each turn: an env step of a worker that runs past the model's ``step_timeout`` (the same
brackets as a worker process's :class:`~sb3_async.runtime.processes.StepWatchdog`) fails :meth:`SerialRuntime.poll`, so
``learn()``, with :class:`~sb3_async.runtime.processes.StepTimeout`, naming the env, its worker, how long it has been
stuck and where (the worker thread's stack). A step stopped in a debugger (``breakpoint()``: a ``bdb`` frame on its
stack) is never timed out. :meth:`SerialRuntime.close` ends every worker thread; one that cannot be ended (stuck in a
blocking call or in native code, where Python cannot interrupt a thread) is a daemon thread, and is reported with a
``RuntimeWarning`` naming it and where it is stuck; it ends at its next ``should_stop()`` if its call ever returns.

What differs from a real async run: no two workers overlap, so there is no speed-up, torch runs on one thread while
the workers run (restored afterwards), and each worker's update sees every update the workers applied before its
turn (the policy lag of A3C and the async Q family is 0).
"""

from __future__ import annotations

import pickle
import random
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence
from typing import Any

import cloudpickle
import numpy as np
import torch

from sb3_async.runtime.base import Runtime, WorkerContext, WorkerSpec, restart_seed
from sb3_async.runtime.processes import StepTimeout, WorkerError

__all__ = ["SerialRuntime"]

_MAIN = -1  # the baton's holder when no worker has it

#: Exit code a failed serial worker reports in its WorkerError (a worker process' exit code after an exception).
_FAILED = 1


class _Stopped(BaseException):
    """Ends a worker thread whose runtime closed before the worker's first turn."""


class _StepClock:
    """Brackets the env steps of a worker thread (a :class:`~sb3_async.runtime.processes.StepWatch`): when its current
    step began, and which env it is; the main thread reads them while it waits for the worker's turn."""

    def __init__(self, timeout: float):
        self.timeout = float(timeout)
        self.label: str | None = None
        self.since = 0.0

    def begin(self, label: str) -> None:
        self.since = time.monotonic()
        self.label = label

    def end(self) -> None:
        self.label = None

    def stop(self) -> None:
        self.label = None


def _stack_of(thread: threading.Thread) -> str:
    """Where ``thread`` is now: its stack, innermost call last (empty when it has ended)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    return "".join(traceback.format_stack(frame)) if frame is not None else ""


def _in_debugger(thread: threading.Thread) -> bool:
    """Whether ``thread`` is stopped in a debugger (pdb's ``breakpoint()``: a frame of ``bdb`` on its stack)."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    while frame is not None:
        if frame.f_code.co_filename.endswith(("bdb.py", "pdb.py")):
            return True
        frame = frame.f_back
    return False


class _Outbox:
    """Stands in for a worker's pipe: each message is copied (pickled, as a pipe would) into the runtime's list."""

    def __init__(self, runtime: SerialRuntime, rank: int):
        self._runtime, self._rank = runtime, rank

    def send(self, message: tuple[str, Any]) -> None:
        kind, data = pickle.loads(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        self._runtime._messages.append((self._rank, kind, data))


class _SerialContext(WorkerContext):
    """A worker's context whose :meth:`should_stop` hands the baton back to the main thread."""

    runtime: SerialRuntime

    def step_watch(self, timeout: float) -> _StepClock:
        """A clock of this worker's env steps, read by the main thread while it waits for the worker's turn."""
        clock = _StepClock(timeout)
        self.runtime._clocks[self.rank] = clock
        return clock

    def should_stop(self) -> bool:
        if self.runtime._closed:  # a worker left behind by close() (stuck in a call that returned since): end it
            raise _Stopped
        if not self._control[0]:  # once stopping, a worker runs on to its end (its last messages, closing its envs)
            self.runtime._hand_back(self.rank)
        return bool(self._control[0]) or self.num_timesteps >= self.total_timesteps


class SerialRuntime(Runtime):
    """Every worker in this process, one at a time, in rank order (``backend="serial"``, for debugging)."""

    turn_based = True

    def __init__(self) -> None:
        self._baton = threading.Condition()
        self._turn = _MAIN
        self._specs: list[WorkerSpec] = []
        self._threads: list[threading.Thread | None] = []
        self._generations: list[int] = []
        self._finished: list[bool] = []
        self._failed: dict[int, str] = {}  # rank -> traceback of a worker that raised, until poll reports it
        self._rng: list[tuple[Any, Any, Any] | None] = []  # each worker's random states between its turns
        self._messages: list[tuple[int, str, Any]] = []
        self._steps = torch.zeros(1, dtype=torch.int64)
        self._control = torch.zeros(2, dtype=torch.int64)  # [stop, pause]: pause is unused (workers run in poll only)
        self._parked = torch.zeros(0, dtype=torch.int64)
        self._run: tuple[int, int, int] = (0, 0, 0)  # seed, start_timesteps, total_timesteps
        self._cancelled: set[int] = set()  # workers ended before their first turn
        self._clocks: list[_StepClock | None] = []  # each worker's env-step clock (None: its steps are not timed)
        self._stuck: int | None = None  # the worker whose step ran past its timeout (it keeps the baton)
        self._threads_before: int | None = None
        self._validate_before: bool | None = None
        self._closed = False

    def start(self, specs: Sequence[WorkerSpec], seed: int, start_timesteps: int, total_timesteps: int) -> None:
        """Get one thread per spec ready; they run only within :meth:`poll`. Torch uses one thread until
        :meth:`close`."""
        if not specs:
            raise ValueError("At least one worker spec is needed")
        n = len(specs)
        self._specs = list(specs)
        self._run = (seed, start_timesteps, total_timesteps)
        self._steps = torch.zeros(n + 1, dtype=torch.int64)
        self._control = torch.zeros(2, dtype=torch.int64)
        self._parked = torch.zeros(n, dtype=torch.int64)
        self._finished = [False] * n
        self._generations = [0] * n
        self._threads = [None] * n
        self._rng = [None] * n
        self._clocks = [None] * n
        self._threads_before = torch.get_num_threads()
        self._validate_before = torch.distributions.Distribution._validate_args
        torch.set_num_threads(1)
        torch.distributions.Distribution.set_default_validate_args(False)  # as in worker processes
        try:
            for i in range(n):
                self._start_thread(i)
        except BaseException:
            self.close()
            raise

    def _start_thread(self, i: int) -> None:
        seed, start_timesteps, total_timesteps = self._run
        spec, n = self._specs[i], len(self._specs)
        ctx = _SerialContext(
            i,
            spec.name,
            n,
            restart_seed(seed, n, self._generations[i]),
            self._steps,
            self._control,
            self._parked,
            _Outbox(self, i),  # type: ignore[arg-type]  # a pipe's send() is all a context uses
            spec.shared,  # the main process' tensors themselves: the workers update them in place
            start_timesteps,
            total_timesteps,
        )
        ctx.runtime = self
        # Each worker gets its own copy of its payload, as a worker process does; not of the shared tensors.
        blob = cloudpickle.dumps((spec.fn, spec.payload))
        thread = threading.Thread(target=self._worker_main, args=(ctx, blob), name=f"sb3_async-{spec.name}", daemon=True)
        self._threads[i] = thread
        self._rng[i] = None
        self._clocks[i] = None
        self._cancelled.discard(i)
        thread.start()

    def _worker_main(self, ctx: _SerialContext, blob: bytes) -> None:
        """What a worker thread runs: its function on its turns, then ``"done"`` (or its traceback)."""
        try:
            self._wait_turn(ctx.rank)
            torch.set_num_threads(1)  # torch's thread count is per thread for OpenMP: set in this one too
            fn, payload = cloudpickle.loads(blob)
            fn(ctx, payload)  # returning is the end of a finished worker (its "done")
        except _Stopped:
            pass
        except BaseException:
            self._failed[ctx.rank] = traceback.format_exc()
        finally:
            with self._baton:
                self._finished[ctx.rank] = True
                if self._turn == ctx.rank:  # a worker cancelled while another holds the baton leaves it there
                    self._turn = _MAIN
                self._baton.notify_all()

    def _wait_turn(self, rank: int) -> None:
        with self._baton:
            while self._turn != rank:
                if rank in self._cancelled:
                    raise _Stopped
                self._baton.wait()

    def _hand_back(self, rank: int) -> None:
        """Called by worker ``rank`` at its ``should_stop()``: give the baton to the main thread, wait for the next
        turn."""
        with self._baton:
            self._turn = _MAIN
            self._baton.notify_all()
        self._wait_turn(rank)

    def _turn_of(self, i: int) -> None:
        """Let worker ``i`` run one turn (up to its next ``should_stop()`` or its end), with its own random states."""
        main_rng = (random.getstate(), np.random.get_state(), torch.get_rng_state())
        state = self._rng[i]
        if state is None:  # its first turn: seeded as a worker process is (SB3's set_random_seed)
            from stable_baselines3.common.utils import set_random_seed

            set_random_seed(restart_seed(self._run[0], len(self._specs), self._generations[i]) + i)
        else:
            random.setstate(state[0])
            np.random.set_state(state[1])
            torch.set_rng_state(state[2])
        try:
            with self._baton:
                self._turn = i
                self._baton.notify_all()
                while self._turn != _MAIN:
                    clock = self._clocks[i]
                    if clock is None:
                        self._baton.wait()
                        continue
                    self._baton.wait(min(0.25, clock.timeout / 4))
                    stuck = self._stuck_step(i, clock)
                    if stuck is not None:
                        self._stuck = i
                        raise stuck
        finally:
            self._rng[i] = (random.getstate(), np.random.get_state(), torch.get_rng_state())
            random.setstate(main_rng[0])
            np.random.set_state(main_rng[1])
            torch.set_rng_state(main_rng[2])

    def _stuck_step(self, i: int, clock: _StepClock) -> StepTimeout | None:
        """The error for worker ``i``'s env step if it has run past its timeout (and is not stopped in a debugger)."""
        label, since = clock.label, clock.since
        if label is None:
            return None
        stuck = time.monotonic() - since
        thread = self._threads[i]
        if stuck <= clock.timeout or thread is None or _in_debugger(thread):
            return None
        return StepTimeout(
            f"{label} has been stuck in a step for {stuck:.0f} s (step_timeout={clock.timeout:g} s); its thread "
            f"{thread.name} is stuck here:\n{_stack_of(thread)}"
        )

    def _wait_for_baton(self, timeout: float | None) -> bool:
        """Wait until no worker holds the baton (the main thread was interrupted during a turn); False after
        ``timeout``."""
        with self._baton:
            return self._baton.wait_for(lambda: self._turn == _MAIN, timeout)

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        """One round: each live worker runs one turn, in rank order. ``timeout`` is not used: a round takes as long as
        its turns."""
        if not self._closed:
            self._wait_for_baton(None)
            for i in range(len(self._specs)):
                if not self._finished[i]:
                    self._turn_of(i)
        for rank in sorted(self._failed):
            thread = self._threads[rank]
            if thread is not None:
                thread.join()
            raise WorkerError(rank, self._specs[rank].name, _FAILED, self._failed.pop(rank))
        out, self._messages = self._messages, []
        return out

    def local_workers(self) -> int:
        return 0  # no process beside the main one: the workers run in its thread's turns

    def steps(self) -> int:
        return int(self._steps[: len(self._specs)].sum())

    def running(self) -> bool:
        return not all(self._finished)

    def request_stop(self) -> None:
        self._control[0] = 1

    def pause(self, timeout: float = 30.0) -> None:
        """Nothing to wait for: workers run only within :meth:`poll`, so between two polls they are parked."""

    def resume(self) -> None:
        pass

    def restart(self, rank: int) -> None:
        if not 0 <= rank < len(self._specs):
            raise ValueError(f"Invalid rank={rank!r}: this runtime runs workers 0..{len(self._specs) - 1}")
        thread = self._threads[rank]
        if thread is not None and thread.is_alive():
            raise RuntimeError(f"Worker {rank} is still running: only a failed worker restarts")
        self._failed.pop(rank, None)
        self._finished[rank] = False
        self._generations[rank] += 1
        self._start_thread(rank)

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker: each runs on from its ``should_stop()`` to its end. When a worker keeps the baton past
        ``timeout`` (stuck in its code; at once for one whose step timed out), the others are ended where they wait for
        their turn, and a worker thread still alive after that is left behind as a daemon thread, reported with a
        ``RuntimeWarning`` naming it and where it is stuck."""
        if self._closed:
            return
        self.request_stop()
        try:
            if self._wait_for_baton(0.0 if self._stuck is not None else timeout):
                for i in range(len(self._specs)):
                    thread = self._threads[i]
                    if thread is None or not thread.is_alive():
                        continue
                    if self._rng[i] is None:  # never ran: end it without running its function
                        with self._baton:
                            self._cancelled.add(i)
                            self._baton.notify_all()
                    else:
                        self._turn_of(i)
                    thread.join(timeout)
        finally:
            self._closed = True
            with self._baton:  # the workers still waiting for a turn end there (a stuck worker keeps the baton)
                self._cancelled.update(range(len(self._specs)))
                self._baton.notify_all()
            self._report_left_behind(timeout)
            if self._threads_before is not None:
                torch.set_num_threads(self._threads_before)
            if self._validate_before is not None:
                torch.distributions.Distribution.set_default_validate_args(self._validate_before)

    def _report_left_behind(self, timeout: float) -> None:
        """Join the worker threads; warn of each one still alive (it cannot be stopped from Python)."""
        deadline = time.monotonic() + timeout
        for i, thread in enumerate(self._threads):
            if thread is None or thread is threading.current_thread():
                continue
            thread.join(max(0.0, deadline - time.monotonic()) if i != self._stuck else 0.0)
            if thread.is_alive():
                warnings.warn(
                    f"Worker {i} ({self._specs[i].name}) could not be stopped: its thread {thread.name} is stuck in a "
                    "call that Python cannot interrupt (a blocking call or native code). It is a daemon thread, left "
                    f"running; it ends at its next should_stop() if the call returns. It is stuck here:\n"
                    f"{_stack_of(thread)}",
                    RuntimeWarning,
                    stacklevel=3,
                )
