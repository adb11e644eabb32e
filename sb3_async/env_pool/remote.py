"""Synchronous commands on the envs: resets and method calls (``get_attr``, ``call``, ``render`` ...).

Each worker gets one message with its envs' share, after the steps it had in flight (its replies come in order), while
this process's envs serve theirs; a worker that dies before answering is asked again once respawned. This module does
not import torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from sb3_async.env_pool.groups import EnvError, WorkerRespawned
from sb3_async.env_pool.steps import StepBookkeeping
from sb3_async.env_pool.worker import Missing
from sb3_async.runtime.processes import WorkerError

__all__ = ["RemoteCalls"]


class RemoteCalls(StepBookkeeping):
    """Resets and method calls, each answered by every env it names before it returns."""

    def reset(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        ids: Iterable[int] | None = None,
    ) -> tuple[dict[int, Any], dict[int, dict[str, Any]]]:
        """Reset envs (all by default, or those in ``ids``); steps still in flight for them are discarded.

        :param seed: env ``i`` is seeded with ``seed + i`` (so the same seed gives the same trajectories); or one seed
            (or None) per env reset
        :param options: passed to every env's ``reset``, or one dict (or None) per env reset
        :param ids: the envs to reset (default: all; with ``autoreset=False`` they rejoin :attr:`agents`)
        :return: ``(observations, infos)``, dicts keyed by env id
        """
        infos = self.reset_envs(seed, options, ids)
        reset_ids = sorted(infos)
        observations = self._buffers.obs.read(reset_ids)
        return {i: self._buffers.obs.row(observations, k) for k, i in enumerate(reset_ids)}, {i: infos[i] for i in reset_ids}

    def reset_envs(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        ids: Iterable[int] | None = None,
    ) -> dict[int, dict[str, Any]]:
        """:meth:`reset` with the observations left in :attr:`buffers` (what the views read); returns the infos."""
        self.check_open()
        targets = self.possible_agents if ids is None else self.check_ids(ids, "reset()")
        self.check_whole_copies(targets, "ids in reset()")
        if seed is None or isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [None if seed is None else int(seed) + i for i in targets]
        elif isinstance(seed, Sequence) and len(seed) == len(targets):
            seeds = [None if s is None else int(s) for s in seed]
        else:
            raise ValueError(f"Invalid seed={seed!r}: expected an int, None, or one seed per env reset ({len(targets)})")
        if options is None or isinstance(options, dict):
            all_options = [options] * len(targets)
        elif isinstance(options, Sequence) and len(options) == len(targets):
            all_options = list(options)
        else:
            raise ValueError(f"Invalid options={options!r}: expected a dict, None, or one per env reset ({len(targets)})")
        self.discard(targets)
        by_worker: dict[int, list[tuple[int, int | None, dict | None]]] = {}
        for i, s, o in zip(targets, seeds, all_options):
            by_worker.setdefault(self._worker_of[i], []).append((i, s, o))
        infos: dict[int, dict[str, Any]] = {}
        errors: dict[int, str] = {}
        for worker_infos, worker_errors in self._sync("reset", by_worker):
            infos.update(worker_infos)
            errors.update(worker_errors)
        for i in targets:
            self._lost.pop(i, None)
        if errors:
            i = min(errors)
            raise EnvError(i, "reset()", errors[i])
        if ids is None:
            self.agents = list(self.possible_agents)
        else:
            self.agents = sorted(set(self.agents) | set(infos))
        return infos

    def _sync(self, command: str, by_worker: dict[int, Any]) -> list[Any]:
        """Send ``command`` to each worker with its data, then wait for the replies (after the steps it had in flight);
        this process's envs serve theirs meanwhile."""
        for w in by_worker:
            if w in self._dead:
                raise self._dead[w]
        for w, data in by_worker.items():
            if w != self._local_group:
                self._post_sync(w, (command, data))
        replies = []
        for w, data in by_worker.items():
            if w == self._local_group:
                replies.append(self._local.reset(data) if command == "reset" else self._local.call(*data))
                continue
            try:
                _, reply = self._receive(w, timeout=None)
            except WorkerRespawned:  # died before answering: ask its replacement
                self._post_sync(w, (command, by_worker[w]))
                _, reply = self._receive(w, timeout=None)
            replies.append(reply)
        return replies

    def _post_sync(self, w: int, message: tuple[str, Any]) -> None:
        """Send a command whose reply is read next: the steps the worker had in flight are read first."""
        for _ in range(2):  # a second try goes to a respawned worker
            while self._pending[w]:
                self._read_step(w)
            if self._post(w, [], message):
                return
        assert self._workers is not None
        raise WorkerError(w, self._worker_name(w), self._workers.exitcode(w), None)

    def _call(self, what: str, name: str, ids: Iterable[int] | None, *args: Any, **kwargs: Any) -> list[Any]:
        self.check_open()
        targets = self.possible_agents if ids is None else self.check_ids(ids, f"{what}({name!r})")
        by_worker: dict[int, Any] = {}
        for i in targets:
            by_worker.setdefault(self._worker_of[i], []).append(i)
        replies = self._sync("call", {w: (ids_w, what, name, args, kwargs) for w, ids_w in by_worker.items()})
        values: dict[int, Any] = {}
        for ids_w, (worker_values, errors) in zip(by_worker.values(), replies):
            if errors:
                i = min(errors)
                raise EnvError(i, f"{what}({name!r})", errors[i])
            values.update(zip(ids_w, worker_values))
        for value in values.values():
            if isinstance(value, Missing):
                raise AttributeError(value.message)
        return [values[i] for i in targets]

    def _has(self, name: str) -> bool:
        return all(self._call("has_attr", name, [0]))

    def get_attr(self, name: str, ids: Iterable[int] | None = None) -> list[Any]:
        """Attribute ``name`` of each env (all by default, or those in ``ids``), looked up through its wrappers."""
        return self._call("get_attr", name, ids)

    def set_attr(self, name: str, value: Any, ids: Iterable[int] | None = None) -> None:
        """Set attribute ``name`` of each env (all by default, or those in ``ids``), on the wrapper that has it."""
        self._call("set_attr", name, ids, value)

    def call(self, name: str, *args: Any, ids: Iterable[int] | None = None, **kwargs: Any) -> list[Any]:
        """Call method ``name`` of each env (all by default, or those in ``ids``) and return the results."""
        return self._call("call", name, ids, *args, **kwargs)

    def has_attr(self, name: str) -> bool:
        """Whether every env has attribute ``name``."""
        return all(self._call("has_attr", name, None))

    def env_is_wrapped(self, wrapper_class: type, ids: Iterable[int] | None = None) -> list[bool]:
        """Whether each env is wrapped with ``wrapper_class``."""
        return self._call("is_wrapped", "", ids, wrapper_class)

    def render(self, ids: Iterable[int] | None = None) -> list[Any]:
        """Each env's ``render()`` (all by default, or those in ``ids``)."""
        return self._call("render", "", ids)
