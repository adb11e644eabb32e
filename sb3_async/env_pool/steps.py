"""The steps in flight: actions checked and sent, results read in order per worker and handed back oldest first.

PettingZoo's ``step``, EnvPool's ``send``/``recv`` and a ``VecEnv``'s ``step_async``/``step_wait`` all come down to
:meth:`StepBookkeeping.start_step` and :meth:`StepBookkeeping.collect`. This module does not import torch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.crashes import WorkerCrashes
from sb3_async.env_pool.groups import EnvError
from sb3_async.validation import check_nonnegative

__all__ = ["StepBookkeeping"]


class StepBookkeeping(WorkerCrashes):
    """Which envs have a step in flight, which results are ready and not taken, and which errors are not reported."""

    def check_action(self, i: int, action: Any) -> Any:
        """``action`` for env ``i``, checked against the action space (``ValueError`` naming the env)."""
        space = self._action_space
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

    def step(
        self, actions: dict[int, Any]
    ) -> tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]:
        """Step the envs named in ``actions`` and wait for all of them.

        :return: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by the ids stepped
        """
        ids = self.send(actions)
        return self._as_dicts(self.collect(ids, None, len(ids), only=True))

    def send(self, actions: dict[int, Any]) -> list[int]:
        """Start a step of each env named in ``actions``; returns at once (with the ids sent).

        :raises KeyError: an unknown id; ``ValueError``: an action outside the action space, an env whose last step
            was not received yet, or (``autoreset=False``) an env that ended and was not reset since
        """
        self.check_open()
        if not isinstance(actions, dict) or not actions:
            raise ValueError(f"actions must be a non-empty dict {{env id: action}}, got {actions!r}")
        ids = self.check_ids(actions, "actions")
        checked = [self.check_action(i, actions[i]) for i in ids]
        self._check_sendable(ids)
        if self.autoreset or self.agents_per_env == 1:
            self.check_whole_copies(ids, "actions")
        else:  # a multi-agent copy steps with the actions of its live slots: those that ended are out until its reset
            n, live = self.agents_per_env, set(self.agents)
            ended = [j for c in {i // n for i in ids} for j in range(c * n, c * n + n) if j not in live]
            self.check_whole_copies([*ids, *ended], "actions")
        write = self._buffers.actions.write
        for i, action in zip(ids, checked):
            write(i, action)
        self.start_step(ids)
        return ids

    def _check_sendable(self, ids: list[int]) -> None:
        in_flight = self._in_flight
        for i in ids:
            if i in in_flight:
                raise ValueError(f"Env {i} has a step not received yet: recv() it before sending it another action")
        if not self.autoreset:
            for i in ids:
                if i not in self.agents:
                    n = self.agents_per_env
                    copy = "" if n == 1 else f" (with every slot of its env copy, {i // n * n}..{i // n * n + n - 1})"
                    raise ValueError(
                        f"Env {i} has ended (terminated or truncated) and autoreset=False: reset() it first{copy}"
                    )

    def send_all(self, actions: Any) -> None:
        """Start a step of every env with ``actions`` (a batch, checked by the caller), as a ``VecEnv`` does.

        :raises ValueError: an env has a step not received yet
        """
        self.check_open()
        ids = self.possible_agents
        if self._in_flight or not self.autoreset:
            self._check_sendable(ids)
        self._buffers.actions.write(slice(None), actions)
        self.start_step(ids)

    def start_step(self, ids: list[int]) -> None:
        """Start a step of the envs ``ids`` (checked, none in flight), their actions already in :attr:`buffers`: one
        message per worker, then the envs of this process step while the workers step theirs."""
        if ids is self.possible_agents:  # every env (a VecEnv's step): the groups as they are
            by_worker = self._every_group
        else:
            by_worker = {}
            worker_of = self._worker_of
            for i in ids:
                by_worker.setdefault(worker_of[i], []).append(i)
        for w in by_worker.keys() & self._dead.keys():
            raise self._dead[w]
        self._seq += 1
        seq = self._seq
        self._in_flight.update(dict.fromkeys(ids, seq))
        local = self._local_group
        for w, group_ids in by_worker.items():
            if w == local:
                continue
            whole = len(group_ids) == len(self._worker_ids[w])
            if self._post(w, None if whole else group_ids, None):
                self._pending[w].append((seq, group_ids))
            # else: respawned (the respawn reports these envs' steps truncated)
        if local is not None and local in by_worker:
            group_ids = by_worker[local]
            infos, errors = self._local.step(group_ids, self._restarts(group_ids))
            self._take(seq, group_ids, infos, errors)

    def collect_every(self) -> dict[int, dict]:
        """Wait for the step of every env, sent together (:meth:`send_all`), and take the results: the infos that are
        not empty, by id (the rest of each result is in :attr:`buffers`). A ``VecEnv``'s ``step_wait``: the workers'
        replies read in turn, without the bookkeeping of :meth:`collect`, which takes over in any other case.

        :raises EnvError: an env raised in its step (``on_error="raise"``)
        """
        ready, pending = self._ready, self._pending
        if not self._dead:
            for w, queue in enumerate(pending):
                while queue and w not in self._dead:
                    self._read_step(w)
        if len(ready) != self.n_envs or not self.autoreset or self._dead:
            return dict(self.collect(self.possible_agents, None, self.n_envs, only=True))
        infos = {i: info for i, (_, info) in ready.items() if info}
        ready.clear()
        self._in_flight.clear()
        return infos

    @property
    def n_in_flight(self) -> int:
        """How many envs have a step sent and not received yet."""
        return len(self._in_flight)

    def recv(
        self, min_ready: int = 1, timeout: float | None = None
    ) -> tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]:
        """The results of the envs whose step has finished: at least ``min_ready`` of them, every one ready by then,
        oldest send first (so no env starves).

        :param min_ready: how many finished envs to wait for (1 up to the number of steps sent and not received)
        :param timeout: seconds to wait at most (None: no limit); ``TimeoutError`` after it, the results kept
        :return: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by env id
        :raises EnvError: an env raised in its step (``on_error="raise"``); the other results are kept for the next recv
        """
        self.check_open()
        waiting = len(self._in_flight)
        if not waiting:
            raise ValueError("recv() with no step in flight: send() actions first")
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or not 1 <= min_ready <= waiting:
            raise ValueError(f"Invalid min_ready={min_ready!r}: expected 1..{waiting} (the steps sent and not received)")
        if timeout is not None:
            timeout = check_nonnegative("timeout", timeout)
        return self._as_dicts(self.collect(list(self._in_flight), timeout, int(min_ready), only=False))

    def collect(self, wanted: Sequence[int], timeout: float | None, count: int, only: bool) -> list[tuple[int, dict]]:
        """Read step results until ``count`` of the ``wanted`` envs are done; take those (``only``) or every result
        ready, oldest send first, as ``(id, info)`` (the rest of each result is in :attr:`buffers`).

        :raises EnvError: an env of ``wanted`` raised in its step (``on_error="raise"``)
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ready, errors, pending, dead = self._ready, self._errors, self._pending, self._dead
        while sum(1 for i in wanted if i in ready or i in errors) < count:
            busy = [w for w in range(len(pending)) if pending[w] and w not in dead]
            if not busy:
                break
            if timeout is None and (len(busy) == 1 or only and count == len(wanted)):
                answered = busy  # every one of them is needed: read each in turn, no select
            else:
                assert self._workers is not None
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                answered = self._workers.ready(busy, left)
                if not answered:
                    raise TimeoutError(f"Fewer than {count} envs finished their step within {timeout} s (kept for later)")
            for w in answered:
                self._read_step(w)
        if not only and self._workers is not None:  # whatever else is ready costs nothing to return now
            while busy := [w for w in range(len(pending)) if pending[w] and w not in dead]:
                answered = self._workers.ready(busy, 0.0)
                if not answered:
                    break
                for w in answered:
                    self._read_step(w)
        failed = sorted(i for i in wanted if i in errors)
        if failed:
            i = failed[0]
            self._in_flight.pop(i, None)
            raise EnvError(i, "step()", errors.pop(i))
        taken_ids = [i for i in wanted if i in ready] if only else list(ready)
        taken_ids.sort(key=lambda i: (ready[i][0], i))
        taken = [(i, ready.pop(i)[1]) for i in taken_ids]
        in_flight = self._in_flight
        for i in taken_ids:
            del in_flight[i]
        if not self.autoreset:
            buffers = self._buffers
            for i in taken_ids:
                if (buffers.terminated[i] or buffers.truncated[i]) and i in self.agents:
                    self.agents.remove(i)
        return taken

    def _as_dicts(
        self, taken: list[tuple[int, dict]]
    ) -> tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]:
        ids = [i for i, _ in taken]
        buffers = self._buffers
        observations = buffers.obs.read(ids)
        rewards, terminated, truncated = buffers.rewards[ids].tolist(), buffers.terminated[ids], buffers.truncated[ids]
        obs, infos = {}, {}
        for k, (i, info) in enumerate(taken):
            obs[i], infos[i] = self._buffers.obs.row(observations, k), info
        return (
            obs,
            dict(zip(ids, rewards)),
            dict(zip(ids, terminated.tolist())),
            dict(zip(ids, truncated.tolist())),
            infos,
        )

    def discard(self, ids: Iterable[int]) -> None:
        """Wait for the steps in flight of ``ids`` (their workers answer in order) and drop their results."""
        targets = set(ids)
        for w in {self._worker_of[i] for i in targets if i in self._in_flight}:
            while self._pending[w] and w not in self._dead:
                self._read_step(w)
        for i in targets:
            self._ready.pop(i, None)
            self._errors.pop(i, None)
            self._in_flight.pop(i, None)
