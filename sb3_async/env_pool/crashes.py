"""A worker's life as the pool sees it: its start and handshake, its replies, and its death, which either fails its
envs (``on_error="raise"``) or respawns it (``on_error="restart"``: each of its envs reports its episode truncated).

Every message to or from a worker goes through :meth:`WorkerCrashes._post` and :meth:`WorkerCrashes._receive`, so that
a death is noticed, and handled, in one place whatever the pool was doing. This module does not import torch.
"""

from __future__ import annotations

from typing import Any

import cloudpickle

from sb3_async.env_pool.buffers import FINAL_OBS, OBJECTS
from sb3_async.env_pool.groups import PoolGroups, WorkerRespawned
from sb3_async.runtime.processes import WorkerError

__all__ = ["WorkerCrashes"]


class WorkerCrashes(PoolGroups):
    """Starting the workers, talking to them, and what follows when one dies (the pool's bookkeeping is updated)."""

    def _start(self, w: int) -> None:
        assert self._workers is not None
        copies = self._worker_copies[w]
        self._workers.start(w, copies, cloudpickle.dumps([self._factories[i] for i in copies]))

    def _handshake(self, w: int) -> None:
        """Read worker ``w``'s spaces (env 0's become the pool's; the others must be equal), then share the buffers."""
        assert self._workers is not None
        _, data = self._receive(w, timeout=None)
        buffers = self._check_spaces(data, w)
        self._workers.share(w, buffers, self._worker_ids[w])

    def _receive(self, w: int, timeout: float | None) -> tuple[str, Any]:
        """The next reply of worker ``w``; raises :class:`WorkerError` if it died (or :class:`WorkerRespawned`)."""
        assert self._workers is not None
        kind, data = self._workers.receive(w, timeout)
        if kind == "fatal":
            self._worker_died(w, data)
        elif kind == "died":
            self._worker_died(w, None, lost=data)
        elif kind in ("step", "reset") and self._buffers_list and self._buffers.obs.objects:
            self._put_objects(data[0])
        return kind, data

    def _put_objects(self, infos: dict[int, dict]) -> None:
        """Store the values of the observations' object leaves that a worker process sent with its infos (and remove
        them from the infos). A respawned worker's report of an episode cut short carries the last observation with
        object leaves it never saw: they are the ones stored here, from the worker that died."""
        obs = self._buffers.obs
        for i, info in infos.items():
            if "error" in info and FINAL_OBS in info:
                info[FINAL_OBS] = obs.with_stored_objects(info[FINAL_OBS], i)
            if OBJECTS in info:
                obs.put_objects(i, info.pop(OBJECTS))

    def _worker_died(self, w: int, worker_traceback: str | None, lost: str | None = None) -> None:
        """Worker ``w`` raised (``worker_traceback``) or died (a Ray host: ``lost`` says how): respawn it
        (``on_error="restart"``, a death only) and raise :class:`WorkerRespawned`, or mark it dead and raise its error."""
        assert self._workers is not None
        error = WorkerError(w, self._worker_name(w), self._workers.exitcode(w), worker_traceback or lost)
        if self.on_error == "restart" and worker_traceback is None and not self._closed:
            self._respawn(w, str(error))
            raise WorkerRespawned
        self._dead[w] = error
        for i in self._worker_ids[w]:
            self._in_flight.pop(i, None)
        self._pending[w].clear()
        raise error

    def _respawn(self, w: int, why: str) -> None:
        """Rebuild worker ``w``: each of its envs reports its episode truncated at its next step (or now, if one was
        in flight)."""
        assert self._workers is not None
        self._workers.kill(w)
        self._start(w)
        self._handshake(w)
        in_flight = [i for i in self._worker_ids[w] if i in self._in_flight and i not in self._ready and i not in self._errors]
        self._pending[w].clear()
        for i in self._worker_ids[w]:
            self._lost[i] = why
        if in_flight:
            seq = self._in_flight[in_flight[0]]
            self._workers.step(w, in_flight, {i: self._lost.pop(i) for i in in_flight}, self._buffers)
            self._pending[w].append((seq, in_flight))

    def _post(self, w: int, ids: list[int] | None, message: tuple[str, Any] | None) -> bool:
        """Send worker ``w`` a step of ``ids`` (``message`` None) or ``message``; False if it had died and was
        respawned (``on_error="restart"``)."""
        assert self._workers is not None
        try:
            if message is None:
                restarts = (
                    {i: self._lost.pop(i) for i in (ids or self._worker_ids[w]) if i in self._lost} if self._lost else None
                )
                self._workers.step(w, ids, restarts, self._buffers)
            else:
                self._workers.send(w, message)
            return True
        except OSError:  # a broken pipe: the worker died
            try:
                self._worker_died(w, None)
            except WorkerRespawned:
                return False
            raise

    def _restarts(self, ids: list[int]) -> dict[int, str] | None:
        """The envs of ``ids`` whose worker was respawned since their last step, and why (taken: reported once)."""
        if not self._lost:
            return None
        return {i: self._lost.pop(i) for i in ids if i in self._lost} or None

    def _read_step(self, w: int) -> None:
        """Read worker ``w``'s next step result (or respawn it, with ``on_error="restart"``)."""
        try:
            _, data = self._receive(w, timeout=None)
        except WorkerRespawned:
            return
        seq, ids = self._pending[w].popleft()
        infos, errors = data
        self._take(seq, ids, infos, errors)

    def _take(self, seq: int, ids: list[int], infos: dict[int, dict], errors: dict[int, str]) -> None:
        """Keep the step results of ``ids`` (sent as ``seq``: returned oldest first) until they are asked for."""
        ready = self._ready
        for i in ids:
            if i in errors:
                self._errors[i] = errors[i]
            else:
                ready[i] = (seq, infos.get(i) or {})
