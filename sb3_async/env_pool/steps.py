"""The steps in flight: actions checked and sent, results read in order per env host and handed back oldest first.

PettingZoo's ``step``, EnvPool's ``send``/``recv`` and a ``VecEnv``'s ``step_async``/``step_wait`` all come down to
:meth:`Steps.start_step` and :meth:`Steps.collect`. This module does not import torch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.errors import EnvError
from sb3_async.env_pool.groups import EnvGroups
from sb3_async.env_pool.step_book import StepBook
from sb3_async.env_pool.supervisor import HostSupervisor
from sb3_async.validation import check_nonnegative

#: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by env id
StepDicts = tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]


class Steps:
    """Sends steps to the groups of envs and collects their results, recording both in the :class:`StepBook`.

    :param groups: the envs and the group each is in
    :param book: the steps in flight
    :param supervisor: the hosts (None when every env steps in this process)
    :param local: the group of envs in this process (an :class:`~sb3_async.env_pool.host.EnvHost` or an
        :class:`~sb3_async.env_pool.envpool_engine.EnvPoolGroup`; None when every env steps in a host)
    :param autoreset: the pool's ``autoreset``: False takes the envs that ended out of ``groups.agents``
    """

    def __init__(self, groups: EnvGroups, book: StepBook, supervisor: HostSupervisor | None, local: Any, autoreset: bool):
        self.groups, self.book, self.supervisor, self.local, self.autoreset = groups, book, supervisor, local, autoreset

    def check_action(self, i: int, action: Any) -> Any:
        """``action`` for env ``i``, checked against the action space (``ValueError`` naming the env)."""
        space = self.groups.action_space
        if isinstance(space, spaces.Box):
            array = np.asarray(action)
            if array.shape != space.shape or not np.issubdtype(array.dtype, np.number):
                raise ValueError(f"Invalid action {action!r} for env {i}: expected a {space.shape} array in {space}")
            action = array.astype(space.dtype, copy=False)
        elif isinstance(space, spaces.Discrete) and isinstance(action, np.ndarray) and action.shape == (1,):
            action = action[0]  # SB3 hands Discrete actions as (1,) arrays at times
        if not space.contains(action):
            raise ValueError(f"Invalid action {action!r} for env {i}: not in the action space {space}")
        return action

    def send(self, actions: dict[int, Any]) -> list[int]:
        """Check ``actions`` ({env id: action}), write them and start the step of their envs; returns the ids sent."""
        groups = self.groups
        if not isinstance(actions, dict) or not actions:
            raise ValueError(f"actions must be a non-empty dict {{env id: action}}, got {actions!r}")
        ids = groups.check_ids(actions, "actions")
        checked = [self.check_action(i, actions[i]) for i in ids]
        self.check_sendable(ids)
        if self.autoreset or groups.agents_per_env == 1:
            groups.check_whole_copies(ids, "actions")
        else:  # a multi-agent copy steps with the actions of its live slots: those that ended are out until its reset
            n, live = groups.agents_per_env, set(groups.agents)
            ended = [j for c in {i // n for i in ids} for j in range(c * n, c * n + n) if j not in live]
            groups.check_whole_copies([*ids, *ended], "actions")
        write = groups.buffers.actions.write
        for i, action in zip(ids, checked):
            write(i, action)
        self.start_step(ids)
        return ids

    def check_sendable(self, ids: list[int]) -> None:
        """``ValueError`` if an env of ``ids`` has a step not received yet, or (``autoreset=False``) has ended."""
        in_flight = self.book.in_flight
        for i in ids:
            if i in in_flight:
                raise ValueError(f"Env {i} has a step not received yet: recv() it before sending it another action")
        if not self.autoreset:
            for i in ids:
                if i not in self.groups.agents:
                    n = self.groups.agents_per_env
                    copy = "" if n == 1 else f" (with every slot of its env copy, {i // n * n}..{i // n * n + n - 1})"
                    raise ValueError(
                        f"Env {i} has ended (terminated or truncated) and autoreset=False: reset() it first{copy}"
                    )

    def send_all(self, actions: Any) -> None:
        """Start a step of every env with ``actions`` (a batch, checked by the caller), as a ``VecEnv`` does."""
        ids = self.groups.possible_agents
        if self.book.in_flight or not self.autoreset:
            self.check_sendable(ids)
        self.groups.buffers.actions.write(slice(None), actions)
        self.start_step(ids)

    def start_step(self, ids: list[int]) -> None:
        """Start a step of the envs ``ids`` (checked, none in flight), their actions already in the buffers: one
        message per host, then the envs of this process step while the hosts step theirs."""
        groups, book = self.groups, self.book
        # every env (a VecEnv's step): the groups as they are
        by_group = groups.every_group if ids is groups.possible_agents else groups.by_group(ids)
        for h in by_group.keys() & book.dead.keys():
            raise book.dead[h]
        seq = book.next_seq()
        book.in_flight.update(dict.fromkeys(ids, seq))
        local = groups.local
        for h, group_ids in by_group.items():
            if h == local:
                continue
            assert self.supervisor is not None
            whole = len(group_ids) == len(groups.ids[h])
            if self.supervisor.post(h, None if whole else group_ids, None):
                book.pending[h].append((seq, group_ids))
            # else: respawned (the respawn reports these envs' steps truncated)
        if local is not None and local in by_group:
            group_ids = by_group[local]
            infos, errors = self.local.step(group_ids, book.restarts(group_ids))
            book.take(seq, group_ids, infos, errors)

    def collect_every(self) -> dict[int, dict]:
        """Wait for the step of every env, sent together (:meth:`send_all`), and take the results: the infos that are
        not empty, by id (the rest of each result is in the buffers). A ``VecEnv``'s ``step_wait``: the hosts'
        replies read in turn, without the bookkeeping of :meth:`collect`, which takes over in any other case.

        :raises EnvError: an env raised in its step (``on_error="raise"``)
        """
        book, groups = self.book, self.groups
        if not book.dead and self.supervisor is not None:
            for h in range(len(book.pending)):
                self.supervisor.read_pending(h)
        if len(book.ready) != groups.n_envs or not self.autoreset or book.dead:
            return dict(self.collect(groups.possible_agents, None, groups.n_envs, only=True))
        ready = book.ready
        infos = {i: info for i, (_, info) in ready.items() if info}
        ready.clear()
        book.in_flight.clear()
        return infos

    def recv(self, min_ready: int, timeout: float | None) -> list[tuple[int, dict]]:
        """At least ``min_ready`` of the steps in flight, and every other one ready by then (:meth:`collect`)."""
        waiting = len(self.book.in_flight)
        if not waiting:
            raise ValueError("recv() with no step in flight: send() actions first")
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or not 1 <= min_ready <= waiting:
            raise ValueError(f"Invalid min_ready={min_ready!r}: expected 1..{waiting} (the steps sent and not received)")
        if timeout is not None:
            timeout = check_nonnegative("timeout", timeout)
        return self.collect(list(self.book.in_flight), timeout, int(min_ready), only=False)

    def collect(self, wanted: Sequence[int], timeout: float | None, count: int, only: bool) -> list[tuple[int, dict]]:
        """Read step results until ``count`` of the ``wanted`` envs are done; take those (``only``) or every result
        ready, oldest send first, as ``(id, info)`` (the rest of each result is in the buffers).

        :raises EnvError: an env of ``wanted`` raised in its step (``on_error="raise"``)
        :raises TimeoutError: fewer than ``count`` finished within ``timeout`` seconds (the results are kept)
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        book, supervisor = self.book, self.supervisor
        ready, errors, pending, dead = book.ready, book.errors, book.pending, book.dead
        while sum(1 for i in wanted if i in ready or i in errors) < count:
            busy = [h for h in range(len(pending)) if pending[h] and h not in dead]
            if not busy:
                break
            assert supervisor is not None
            if timeout is None and (len(busy) == 1 or only and count == len(wanted)):
                answered = busy  # every one of them is needed: read each in turn, no select
            else:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                answered = supervisor.hosts.ready(busy, left)
                if not answered:
                    raise TimeoutError(f"Fewer than {count} envs finished their step within {timeout} s (kept for later)")
            for h in answered:
                supervisor.read_step(h)
        if not only and supervisor is not None:  # whatever else is ready costs nothing to return now
            while busy := [h for h in range(len(pending)) if pending[h] and h not in dead]:
                answered = supervisor.hosts.ready(busy, 0.0)
                if not answered:
                    break
                for h in answered:
                    supervisor.read_step(h)
        failed = sorted(i for i in wanted if i in errors)
        if failed:
            i = failed[0]
            book.in_flight.pop(i, None)
            raise EnvError(i, "step()", errors.pop(i))
        taken_ids = [i for i in wanted if i in ready] if only else list(ready)
        taken_ids.sort(key=lambda i: (ready[i][0], i))
        taken = [(i, ready.pop(i)[1]) for i in taken_ids]
        in_flight = book.in_flight
        for i in taken_ids:
            del in_flight[i]
        if not self.autoreset:
            buffers, agents = self.groups.buffers, self.groups.agents
            for i in taken_ids:
                if (buffers.terminated[i] or buffers.truncated[i]) and i in agents:
                    agents.remove(i)
        return taken

    def as_dicts(self, taken: list[tuple[int, dict]]) -> StepDicts:
        """The results taken (:meth:`collect`) as ``(observations, rewards, terminations, truncations, infos)``."""
        ids = [i for i, _ in taken]
        buffers = self.groups.buffers
        observations = buffers.obs.read(ids)
        rewards, terminated, truncated = buffers.rewards[ids].tolist(), buffers.terminated[ids], buffers.truncated[ids]
        obs, infos = {}, {}
        for k, (i, info) in enumerate(taken):
            obs[i], infos[i] = buffers.obs.row(observations, k), info
        return (
            obs,
            dict(zip(ids, rewards)),
            dict(zip(ids, terminated.tolist())),
            dict(zip(ids, truncated.tolist())),
            infos,
        )

    def discard(self, ids: Iterable[int]) -> None:
        """Wait for the steps in flight of ``ids`` (their hosts answer in order) and drop their results."""
        targets = set(ids)
        book, group_of = self.book, self.groups.group_of
        for h in {group_of[i] for i in targets if i in book.in_flight}:
            if self.supervisor is not None and h != self.groups.local:
                self.supervisor.read_pending(h)
        book.forget(list(targets))
