"""Synchronous commands on the envs: resets and method calls (``get_attr``, ``call``, ``render`` ...).

Each env host gets one message with its envs' share, after the steps it had in flight (its replies come in order),
while this process's envs serve theirs; a host that dies before answering is asked again once respawned. This module
does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from sb3_async.env_pool.errors import EnvError, HostRespawned
from sb3_async.env_pool.groups import EnvGroups
from sb3_async.env_pool.host import Missing
from sb3_async.env_pool.steps import Steps
from sb3_async.env_pool.supervisor import HostSupervisor


class RemoteCalls:
    """Resets and method calls, each answered by every env it names before it returns.

    :param groups: the envs and the group each is in
    :param steps: the steps in flight (a reset discards those of the envs it resets)
    :param supervisor: the hosts (None when every env steps in this process)
    :param local: the group of envs in this process (None when every env steps in a host)
    """

    def __init__(self, groups: EnvGroups, steps: Steps, supervisor: HostSupervisor | None, local: Any):
        self.groups, self.steps, self.supervisor, self.local = groups, steps, supervisor, local

    def reset(
        self,
        seed: int | Sequence[int | None] | None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None,
        ids: Iterable[int] | None,
    ) -> dict[int, dict[str, Any]]:
        """Reset the envs ``ids`` (None: all), seeded and with options as :meth:`AsyncEnvPool.reset
        <sb3_async.env_pool.pool.AsyncEnvPool.reset>` says; their observations are left in the buffers, their infos
        returned by id."""
        groups = self.groups
        targets = groups.possible_agents if ids is None else groups.check_ids(ids, "reset()")
        groups.check_whole_copies(targets, "ids in reset()")
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
        self.steps.discard(targets)
        by_group: dict[int, list[tuple[int, int | None, dict | None]]] = {}
        for i, s, o in zip(targets, seeds, all_options):
            by_group.setdefault(groups.group_of[i], []).append((i, s, o))
        infos: dict[int, dict[str, Any]] = {}
        errors: dict[int, str] = {}
        for group_infos, group_errors in self._sync("reset", by_group):
            infos.update(group_infos)
            errors.update(group_errors)
        lost = self.steps.book.lost
        for i in targets:
            lost.pop(i, None)
        if errors:
            i = min(errors)
            raise EnvError(i, "reset()", errors[i])
        if ids is None:
            groups.agents = list(groups.possible_agents)
        else:
            groups.agents = sorted(set(groups.agents) | set(infos))
        return infos

    def call(self, what: str, name: str, ids: Iterable[int] | None, *args: Any, **kwargs: Any) -> list[Any]:
        """Ask the envs ``ids`` (None: all) to ``what`` (``"get_attr"``, ``"set_attr"``, ``"call"``, ``"has_attr"``,
        ``"is_wrapped"``, ``"render"``) ``name`` with ``args`` and ``kwargs``; their answers, in the order of ``ids``.

        :raises EnvError: an env raised; ``AttributeError``: an env has no attribute ``name``
        """
        groups = self.groups
        targets = groups.possible_agents if ids is None else groups.check_ids(ids, f"{what}({name!r})")
        by_group = groups.by_group(targets)
        replies = self._sync("call", {g: (ids_g, what, name, args, kwargs) for g, ids_g in by_group.items()})
        values: dict[int, Any] = {}
        for ids_g, (group_values, errors) in zip(by_group.values(), replies):
            if errors:
                i = min(errors)
                raise EnvError(i, f"{what}({name!r})", errors[i])
            values.update(zip(ids_g, group_values))
        for value in values.values():
            if isinstance(value, Missing):
                raise AttributeError(value.message)
        return [values[i] for i in targets]

    def _sync(self, command: str, by_group: dict[int, Any]) -> list[Any]:
        """Send ``command`` to each host with its data, then wait for the replies (after the steps it had in flight);
        this process's envs serve theirs meanwhile."""
        dead, local, supervisor = self.steps.book.dead, self.groups.local, self.supervisor
        for g in by_group:
            if g in dead:
                raise dead[g]
        for g, data in by_group.items():
            if g != local:
                self._post_sync(g, (command, data))
        replies = []
        for g, data in by_group.items():
            if g == local:
                replies.append(self.local.reset(data) if command == "reset" else self.local.call(*data))
                continue
            assert supervisor is not None
            try:
                _, reply = supervisor.receive(g, timeout=None)
            except HostRespawned:  # died before answering: ask its replacement
                self._post_sync(g, (command, by_group[g]))
                _, reply = supervisor.receive(g, timeout=None)
            replies.append(reply)
        return replies

    def _post_sync(self, h: int, message: tuple[str, Any]) -> None:
        """Send host ``h`` a command whose reply is read next: the steps it had in flight are read first."""
        supervisor, pending = self.supervisor, self.steps.book.pending
        assert supervisor is not None
        for _ in range(2):  # a second try goes to a respawned host
            while pending[h]:
                supervisor.read_step(h)
            if supervisor.post(h, [], message):
                return
        raise supervisor.error(h, None)
