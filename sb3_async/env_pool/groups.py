"""Where the pool's envs are: their ids, the group each env host holds (then this process's group), which envs are live,
the spaces the groups reported and the shared buffers made from them.

:class:`EnvGroups` is a layout and its checks; it sends nothing to anyone. This module does not import torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.errors import SpacesDifferError
from sb3_async.env_pool.shared_buffers import SharedBuffers, same_layout


class EnvGroups:
    """``n_envs`` envs in groups of contiguous ids: one per env host, then, with ``local_envs``, the last ids in this
    process. Group ``g < n_hosts`` is host ``g``'s; group ``n_hosts`` (:attr:`local`) is this process's.

    A multi-agent env's copies report one slot per agent at their handshake (:meth:`check_spaces`): every id then
    becomes a slot id, and :attr:`n_envs` counts slots.

    :param n_envs: number of env copies
    :param n_hosts: number of env hosts (each holds at least one env)
    :param local_envs: how many envs (the last ids) step in this process
    """

    def __init__(self, n_envs: int, n_hosts: int, local_envs: int):
        self.n_envs, self.n_hosts, self.local_envs = n_envs, n_hosts, local_envs
        #: Every env id, and the ids of the envs live now (PettingZoo's ``possible_agents`` and ``agents``)
        self.possible_agents: list[int] = list(range(n_envs))
        self.agents: list[int] = list(self.possible_agents)
        remote = np.arange(n_envs - local_envs)
        #: The ids of each group: one per host, then this process's (the last ``local_envs`` ids), if any
        self.ids = [list(map(int, part)) for part in np.array_split(remote, n_hosts)] if n_hosts else []
        if local_envs:
            self.ids.append(list(range(n_envs - local_envs, n_envs)))
        #: The group of this process's envs (None when every env steps in a host)
        self.local = n_hosts if local_envs else None
        #: The env copies of each group, as started; a multi-agent env's slots replace them in :attr:`ids`
        self.copies = [list(ids) for ids in self.ids]
        #: How many env copies the pool holds, and each copy's number of slots (its agents; 1 for a gymnasium env)
        self.n_env_copies, self.agents_per_env = n_envs, 1
        #: The agents of a multi-agent env (``possible_agents``; empty for a gymnasium env or a single agent): slot
        #: ``i`` is agent ``env_agents[i % agents_per_env]`` of env copy ``i // agents_per_env``
        self.env_agents: list[Any] = []
        self.group_of = [g for g, ids in enumerate(self.ids) for _ in ids]  # env id -> group
        self.every_group = dict(enumerate(self.ids))
        #: The shared buffers, made at the first handshake (a list so that the pool's finalizer can hold it before)
        self.buffers_list: list[SharedBuffers] = []
        self.observation_space: spaces.Space
        self.action_space: spaces.Space
        #: The observation spaces of the envs whose space differs from env 0's in values only (bounds, counts), not in
        #: the layout of its values (:meth:`check_spaces`)
        self.observation_spaces: dict[int, spaces.Space] = {}

    @property
    def buffers(self) -> SharedBuffers:
        """Every env's observation, action, reward and end flags."""
        return self.buffers_list[0]

    def by_group(self, ids: Iterable[int]) -> dict[int, list[int]]:
        """``ids`` sorted into their groups (in the order given)."""
        groups: dict[int, list[int]] = {}
        group_of = self.group_of
        for i in ids:
            groups.setdefault(group_of[i], []).append(i)
        return groups

    def host_name(self, h: int) -> str:
        """How errors name host ``h``: by the envs it holds."""
        ids = self.ids[h]
        return f"env host holding envs {ids[0]}..{ids[-1]}" if len(ids) > 1 else f"env host of env {ids[0]}"

    def differing_observation_space(self) -> str | None:
        """None when every env has env 0's observation space, else which env's differs, and how."""
        for i, space in sorted(self.observation_spaces.items()):
            return f"env {i} has observation space {space}, env 0 has {self.observation_space}"
        return None

    # ---------------------------------------------------------------- spaces
    def check_spaces(self, data: list[tuple[int, spaces.Space, spaces.Space]], g: int) -> SharedBuffers:
        """Check group ``g``'s spaces (env 0's become the pool's) and return the buffers, made at the first group."""
        reported = [i for i, _, _ in data]
        if reported != self.ids[g]:
            self._agent_slots(g, reported)
        for i, obs_space, act_space in data:
            if i == 0 and not self.buffers_list:  # the first env at start: a respawned host 0 maps the same buffers
                self.observation_space, self.action_space = obs_space, act_space
                self.buffers_list.append(SharedBuffers(obs_space, act_space, self.n_envs, track_actions=True))
            elif obs_space != self.observation_space:
                if not same_layout(obs_space, self.observation_space):
                    raise SpacesDifferError(
                        f"Env {i} has observation space {obs_space}, env 0 has {self.observation_space}: the envs' "
                        "observations must have the same shapes and dtypes"
                    )
                self.observation_spaces[i] = obs_space
            elif act_space != self.action_space:
                raise SpacesDifferError(f"Env {i} has action space {act_space}, env 0 has {self.action_space}")
        return self.buffers

    def _agent_slots(self, g: int, reported: list[int]) -> None:
        """Group ``g`` holds a multi-agent env (:mod:`sb3_async.env_pool.multi_agent`) and reported its agents' slots:
        at the first group, every id becomes a slot id (copy ``c`` of ``n`` agents owns ``c * n .. c * n + n - 1``)."""
        copies = self.copies[g]
        n = len(reported) // len(copies)
        expected = [c * n + a for c in copies for a in range(n)]
        if self.buffers_list or n < 1 or reported != expected:
            raise ValueError(
                f"The env copies {copies[0]}..{copies[-1]} report the slots {reported[0]}..{reported[-1]}, not those of the"
                f" other copies: every env copy must be the same kind of env (gymnasium or PettingZoo) with the same agents"
            )
        self.agents_per_env = n
        self.ids = [[c * n + a for c in group for a in range(n)] for group in self.copies]
        self.n_envs, self.local_envs = self.n_env_copies * n, self.local_envs * n
        self.group_of = [g for g, ids in enumerate(self.ids) for _ in ids]
        self.every_group = dict(enumerate(self.ids))
        self.possible_agents = list(range(self.n_envs))
        self.agents = list(self.possible_agents)

    # ---------------------------------------------------------------- ids
    def check_ids(self, ids: Iterable[Any], what: str) -> list[int]:
        """``ids`` as a list of env ids, each known and none repeated (``KeyError``/``ValueError`` naming ``what``)."""
        checked = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.n_envs:
                raise KeyError(f"Unknown env id {i!r} in {what}: the ids are 0..{self.n_envs - 1}")
            checked.append(int(i))
        if len(set(checked)) != len(checked):
            raise ValueError(f"Repeated env ids in {what}: {checked}")
        return checked

    def check_whole_copies(self, ids: Iterable[int], what: str) -> None:
        """``ValueError`` unless ``ids`` hold every slot of each multi-agent env copy they touch (a copy steps and
        resets all its agents at once)."""
        n = self.agents_per_env
        if n == 1:
            return
        given = set(ids)
        for c in sorted({i // n for i in given}):
            missing = [i for i in range(c * n, c * n + n) if i not in given]
            if missing:
                raise ValueError(
                    f"Invalid {what}: slots {missing} of env copy {c} are missing; a multi-agent env copy steps and resets"
                    f" all its agents at once (slots {c * n}..{c * n + n - 1})"
                )
