"""The pool's host processes (``backend="mp"``): one process per group of envs on this machine, started through
:mod:`sb3_async.runtime.processes`, the shared buffers mapped in each.

A step is one byte to the host (:data:`~sb3_async.env_pool.host.STEP`, with the ids when not every env of the
group steps) and an empty reply unless an info is not empty (infos of numbers packed:
:mod:`~sb3_async.env_pool.info_codec`); observations, actions, rewards and flags stay in the shared buffers. Waiting
blocks on the pipes: an idle pool costs no CPU, and a busy machine does not starve it (a spinning host would take the
learner's core). Only when the main process steps envs too (``local_envs``, the split layout of synchronous stepping,
where each step follows the last at once) does a host poll for its next command for
:data:`~sb3_async.env_pool.host.SPIN_SECONDS` before it blocks, saving the tens of microseconds a wake-up costs.
"""

from __future__ import annotations

import os
import pickle
import select
from collections.abc import Sequence
from multiprocessing import reduction
from multiprocessing.connection import wait
from typing import Any

import cloudpickle

from sb3_async.env_pool.host import dumps, env_host_main, step_message
from sb3_async.env_pool.info_codec import PACKED, InfoUnpacker
from sb3_async.env_pool.shared_buffers import SharedBuffers
from sb3_async.runtime.processes import Launcher

__all__ = ["ProcessHosts"]


def _close(launcher: Launcher, procs: list[Any], conns: list[Any], busy: list[int], timeout: float) -> None:
    """Stop the processes (idle ones politely, busy ones with SIGTERM, then SIGKILL) and close their pipes.

    A function of its arguments only, so that a ``weakref.finalize`` of the pool can run it."""
    for proc, conn, outstanding in zip(procs, conns, busy):
        if proc is None or not proc.is_alive():
            continue
        if outstanding:  # mid-step: it would read "close" only after its step, however long that takes
            proc.terminate()
            continue
        try:
            conn.send(("close", None))
        except (OSError, ValueError):
            proc.terminate()
    alive = [proc for proc in procs if proc is not None]
    launcher.stop(alive, timeout)
    for proc in alive:
        if not proc.is_alive():
            proc.close()
    for conn in conns:
        if conn is not None:
            conn.close()
    procs[:] = [None] * len(procs)
    conns[:] = [None] * len(conns)


class ProcessHosts:
    """The driver's side of the pool's host processes, addressed by index ``h``.

    Holds no reference to the pool, so that the pool's finalizer can close it.

    :param n_hosts: number of host processes
    :param start_method: ``"forkserver"``, ``"spawn"`` or ``"fork"``
    :param autoreset: the pool's ``autoreset``
    :param on_error: the pool's ``on_error``
    :param spin_seconds: how long each host polls for its next command before it blocks
    """

    def __init__(self, n_hosts: int, start_method: str, autoreset: bool, on_error: str, spin_seconds: float = 0.0):
        self._launcher = Launcher(start_method)
        self.autoreset, self.on_error, self.spin_seconds = autoreset, on_error, spin_seconds
        self._procs: list[Any] = [None] * n_hosts
        self._conns: list[Any] = [None] * n_hosts
        self._busy = [0] * n_hosts  # commands sent and not answered yet, per host
        # Per host, a poll of its pipe and its process sentinel (a dead host's child may hold its pipe open)
        self._polls: list[Any] = [None] * n_hosts
        self._unpackers = [InfoUnpacker() for _ in range(n_hosts)]  # the info schemas each host announced
        self._ids: list[list[int]] = [[] for _ in range(n_hosts)]  # each host's envs

    def start(self, h: int, ids: list[int], factories_blob: bytes) -> None:
        """Start host ``h``; its first reply is its envs' spaces."""
        parent_conn, child_conn = self._launcher.context.Pipe(duplex=True)  # duplex: a Unix socket, which can carry the fd
        proc = self._launcher.process(
            env_host_main,
            f"sb3_async-env-pool-{h}",
            (h, ids, factories_blob, child_conn, os.getpid(), self.autoreset, self.on_error, self.spin_seconds),
        )
        child_conn.close()
        self._procs[h], self._conns[h] = proc, parent_conn
        self._busy[h] = 1  # the spaces
        self._unpackers[h] = InfoUnpacker()  # a respawned host announces its schemas anew
        self._polls[h] = poll = select.poll()
        poll.register(parent_conn.fileno(), select.POLLIN)
        poll.register(proc.sentinel, select.POLLIN)

    def share(self, h: int, buffers: SharedBuffers, ids: list[int]) -> None:
        """Give host ``h`` the shared buffers (their descriptor travels over its pipe)."""
        reduction.send_handle(self._conns[h], buffers.fd, self._procs[h].pid)
        self._conns[h].send(buffers.n_envs)
        self._ids[h] = list(ids)

    def step(self, h: int, ids: list[int] | None, restarts: dict[int, str] | None, buffers: SharedBuffers) -> None:
        """Start a step of host ``h``'s envs ``ids`` (None: all of them), their actions in the buffers.

        :raises OSError: the host's pipe is broken (it died)
        """
        objects = buffers.actions.take_objects(self._ids[h] if ids is None else ids) if buffers.actions.objects else None
        if restarts or objects:  # the actions' parts that are not arrays travel with the command
            self._conns[h].send_bytes(dumps(("step", (ids, restarts, objects))))
        else:
            self._conns[h].send_bytes(step_message(ids))
        self._busy[h] += 1

    def send(self, h: int, message: tuple[str, Any]) -> None:
        """Send a command (``reset``, ``call``); its reply is read by :meth:`receive`. Pickled with cloudpickle, as the
        env factories are, so that a class or function of the user's script (a wrapper class for ``env_is_wrapped``, a
        lambda for ``set_attr``) arrives as the same object the factories' envs use.

        :raises OSError: the host's pipe is broken (it died)
        """
        self._conns[h].send_bytes(cloudpickle.dumps(message))
        self._busy[h] += 1

    def receive(self, h: int, timeout: float | None) -> tuple[str, Any]:
        """Host ``h``'s next reply: ``(kind, data)``, ``("fatal", traceback)`` if it raised, ``("died", None)`` if it
        died (seen at once: its pipe ends).

        :raises TimeoutError: no reply within ``timeout`` seconds
        """
        conn = self._conns[h]
        events = self._polls[h].poll(None if timeout is None else max(0, int(timeout * 1000)))
        if not any(fd == conn.fileno() for fd, _ in events) and not conn.poll():
            if events:  # the sentinel: the process ended
                return "died", None
            raise TimeoutError
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return "died", None
        self._busy[h] -= 1
        if not data:  # a step with no infos to report
            return "step", ({}, {})
        if data[:1] == PACKED:
            return "step", (self._unpackers[h].unpack(data), {})
        kind, payload = pickle.loads(data)
        if kind == "schema":  # a step whose infos have a new schema: packed from the next such step on
            (number, schema), infos = payload
            self._unpackers[h].learn(number, schema)
            return "step", (infos, {})
        return kind, payload

    def ready(self, hosts: Sequence[int], timeout: float | None) -> list[int]:
        """The hosts among ``hosts`` with a reply to read (or dead), waiting up to ``timeout`` s for the first."""
        conns = {self._conns[h]: h for h in hosts}
        sentinels = {self._procs[h].sentinel: h for h in hosts}
        ready = wait([*conns, *sentinels], timeout=timeout)
        return sorted({conns[r] if r in conns else sentinels[r] for r in ready})

    def exitcode(self, h: int) -> int | None:
        """Host ``h``'s exit code, after waiting up to a second for it to end."""
        proc = self._procs[h]
        if proc is None:
            return None
        proc.join(timeout=1.0)
        return proc.exitcode

    def pid(self, h: int) -> int | None:
        proc = self._procs[h]
        return None if proc is None else proc.pid

    def kill(self, h: int) -> None:
        """Drop host ``h`` (dead already) before it is started again."""
        proc, conn = self._procs[h], self._conns[h]
        if proc is not None:
            self._launcher.stop([proc], timeout=0.0)
            proc.close()
        if conn is not None:
            conn.close()
        self._procs[h] = self._conns[h] = self._polls[h] = None
        self._busy[h] = 0

    def closer(self) -> tuple[Any, tuple[Any, ...]]:
        """A function and its arguments that stop every host, holding no reference to this object (a finalizer's)."""
        return _close, (self._launcher, self._procs, self._conns, self._busy)

    def close(self, timeout: float = 5.0) -> None:
        """Stop every host (idle ones politely, busy ones with SIGTERM, then SIGKILL). Safe to call twice."""
        _close(self._launcher, self._procs, self._conns, self._busy, timeout)
