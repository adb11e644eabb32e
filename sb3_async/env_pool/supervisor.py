"""An env host's life as the pool sees it: its start and handshake, every message to and from it, and its death, which
either fails its envs (``on_error="raise"``) or respawns it (``on_error="restart"``: each of its envs reports its
episode truncated).

:class:`EnvHosts` is what the pool needs of its hosts, whatever runs them (processes,
:mod:`~sb3_async.env_pool.process_hosts`; Ray actors, :mod:`~sb3_async.env_pool.ray_hosts`). Every message goes through
:meth:`HostSupervisor.post` and :meth:`HostSupervisor.receive`, so that a death is noticed, and handled, in one place
whatever the pool was doing. This module does not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import cloudpickle

from sb3_async.env_pool.errors import HostRespawned
from sb3_async.env_pool.groups import EnvGroups
from sb3_async.env_pool.process_hosts import ProcessHosts
from sb3_async.env_pool.shared_buffers import FINAL_OBS, OBJECTS, SharedBuffers
from sb3_async.env_pool.step_book import StepBook
from sb3_async.runtime.processes import WorkerError


class EnvHosts(Protocol):
    """The env hosts outside this process (processes, Ray actors), addressed by index ``h``, each holding a group."""

    def start(self, h: int, ids: list[int], factories_blob: bytes) -> None: ...
    def share(self, h: int, buffers: SharedBuffers, ids: list[int]) -> None: ...
    def step(self, h: int, ids: list[int] | None, restarts: dict[int, str] | None, buffers: SharedBuffers) -> None: ...
    def send(self, h: int, message: tuple[str, Any]) -> None: ...
    def receive(self, h: int, timeout: float | None) -> tuple[str, Any]: ...
    def ready(self, hosts: Sequence[int], timeout: float | None) -> list[int]: ...
    def exitcode(self, h: int) -> int | None: ...
    def pid(self, h: int) -> int | None: ...
    def kill(self, h: int) -> None: ...
    def closer(self) -> tuple[Any, tuple[Any, ...]]: ...
    def close(self, timeout: float = 5.0) -> None: ...


class HostSupervisor:
    """Starts the hosts, talks to them, and handles a death (the :class:`StepBook` is updated to match).

    :param hosts: the hosts
    :param groups: the envs each host holds, the spaces and the buffers
    :param book: the steps in flight
    :param factories: one env factory per env copy
    :param on_error: the pool's ``on_error``: ``"restart"`` respawns a host that died
    """

    def __init__(self, hosts: EnvHosts, groups: EnvGroups, book: StepBook, factories: list[Any], on_error: str):
        self.hosts, self.groups, self.book = hosts, groups, book
        self.factories, self.on_error = factories, on_error
        #: Set when the pool closes: a host that dies then is not respawned
        self.closing = False

    def start(self, h: int) -> None:
        """Start host ``h`` with its env copies."""
        copies = self.groups.copies[h]
        self.hosts.start(h, copies, cloudpickle.dumps([self.factories[i] for i in copies]))

    def handshake(self, h: int) -> None:
        """Read host ``h``'s spaces (env 0's become the pool's; the others must be equal), then share the buffers."""
        _, data = self.receive(h, timeout=None)
        buffers = self.groups.check_spaces(data, h)
        self.hosts.share(h, buffers, self.groups.ids[h])

    def receive(self, h: int, timeout: float | None) -> tuple[str, Any]:
        """The next reply of host ``h``; raises :class:`WorkerError` if it died (or :class:`HostRespawned`)."""
        kind, data = self.hosts.receive(h, timeout)
        if kind == "fatal":
            self.died(h, data)
        elif kind == "died":
            self.died(h, None, lost=data)
        elif kind in ("step", "reset") and self.groups.buffers_list and self.groups.buffers.obs.objects:
            self._put_objects(data[0])
        return kind, data

    def _put_objects(self, infos: dict[int, dict]) -> None:
        """Store the values of the observations' object leaves that a host process sent with its infos (and remove
        them from the infos). A respawned host's report of an episode cut short carries the last observation with
        object leaves it never saw: they are the ones stored here, from the host that died."""
        obs = self.groups.buffers.obs
        for i, info in infos.items():
            if "error" in info and FINAL_OBS in info:
                info[FINAL_OBS] = obs.with_stored_objects(info[FINAL_OBS], i)
            if OBJECTS in info:
                obs.put_objects(i, info.pop(OBJECTS))

    def error(self, h: int, host_traceback: str | None) -> WorkerError:
        """The error that reports host ``h``'s end (with its traceback if it raised)."""
        return WorkerError(h, self.groups.host_name(h), self.hosts.exitcode(h), host_traceback)

    def died(self, h: int, host_traceback: str | None, lost: str | None = None) -> None:
        """Host ``h`` raised (``host_traceback``) or died (a Ray host: ``lost`` says how): respawn it
        (``on_error="restart"``, a death only) and raise :class:`HostRespawned`, or mark it dead and raise its error."""
        error = self.error(h, host_traceback or lost)
        if self.on_error == "restart" and host_traceback is None and not self.closing:
            self._respawn(h, str(error))
            raise HostRespawned
        book = self.book
        book.dead[h] = error
        for i in self.groups.ids[h]:
            book.in_flight.pop(i, None)
        book.pending[h].clear()
        raise error

    def _respawn(self, h: int, why: str) -> None:
        """Rebuild host ``h``: each of its envs reports its episode truncated at its next step (or now, if one was
        in flight)."""
        book, ids = self.book, self.groups.ids[h]
        self.hosts.kill(h)
        self.start(h)
        self.handshake(h)
        in_flight = [i for i in ids if i in book.in_flight and i not in book.ready and i not in book.errors]
        book.pending[h].clear()
        for i in ids:
            book.lost[i] = why
        if in_flight:
            seq = book.in_flight[in_flight[0]]
            self.hosts.step(h, in_flight, {i: book.lost.pop(i) for i in in_flight}, self.groups.buffers)
            book.pending[h].append((seq, in_flight))

    def post(self, h: int, ids: list[int] | None, message: tuple[str, Any] | None) -> bool:
        """Send host ``h`` a step of ``ids`` (``message`` None; None: all its envs) or ``message``; False if it had
        died and was respawned (``on_error="restart"``)."""
        lost = self.book.lost
        try:
            if message is None:
                restarts = {i: lost.pop(i) for i in (ids or self.groups.ids[h]) if i in lost} if lost else None
                self.hosts.step(h, ids, restarts, self.groups.buffers)
            else:
                self.hosts.send(h, message)
            return True
        except OSError:  # a broken pipe: the host died
            try:
                self.died(h, None)
            except HostRespawned:
                return False
            raise

    def read_step(self, h: int) -> None:
        """Read host ``h``'s next step result into the book (or respawn it, with ``on_error="restart"``)."""
        try:
            _, data = self.receive(h, timeout=None)
        except HostRespawned:
            return
        seq, ids = self.book.pending[h].popleft()
        infos, errors = data
        self.book.take(seq, ids, infos, errors)

    def read_pending(self, h: int) -> None:
        """Read every step host ``h`` has yet to answer (it answers in order), unless it is dead."""
        pending, dead = self.book.pending[h], self.book.dead
        while pending and h not in dead:
            self.read_step(h)


def make_hosts(
    backend: str,
    n_hosts: int,
    start_method: str,
    autoreset: bool,
    on_error: str,
    backend_kwargs: dict | None,
    spin_seconds: float = 0.0,
) -> EnvHosts:
    """The env hosts of a backend: processes on this machine (``"mp"``, polling ``spin_seconds`` for each command
    before they block) or Ray actors (``"ray"``)."""
    if backend == "ray":  # connects to Ray (or starts a local one) now; ImportError with the hint without Ray
        from sb3_async.env_pool.ray_hosts import RayEnvHosts

        return RayEnvHosts(n_hosts, autoreset, on_error, **(backend_kwargs or {}))
    return ProcessHosts(n_hosts, start_method, autoreset, on_error, spin_seconds)


def release(closer: tuple[Any, tuple[Any, ...]] | None, buffers: list[SharedBuffers], timeout: float) -> None:
    """Stop the hosts (``closer``: :meth:`EnvHosts.closer`) and release the shared buffers: what the pool's finalizer
    runs, holding no reference to the pool."""
    if closer is not None:
        function, args = closer
        function(*args, timeout)
    for shared in buffers:
        shared.close()
