"""The pool's groups of envs: which envs each worker holds, the pool's state over them, the spaces and buffers.

:class:`PoolGroups` is the bottom of :class:`~sb3_async.env_pool.core.EnvPoolBase`, whose jobs build on each other one
module each: the groups here; a worker's start, replies, death and respawn (:mod:`~sb3_async.env_pool.crashes`); the
steps in flight (:mod:`~sb3_async.env_pool.steps`); resets and method calls on the envs
(:mod:`~sb3_async.env_pool.remote`); construction and lifecycle (:mod:`~sb3_async.env_pool.core`). This module does not
import torch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np
from gymnasium import spaces
from gymnasium.error import ClosedEnvironmentError

from sb3_async.env_pool.buffers import SharedBuffers, same_layout
from sb3_async.runtime.processes import WorkerError

__all__ = ["EnvError", "PoolClosedError", "SpacesDifferError", "PoolGroups", "WorkerRespawned", "Workers"]


class PoolClosedError(RuntimeError, ClosedEnvironmentError):
    """A closed pool was used: a ``RuntimeError``, and gymnasium's ``ClosedEnvironmentError`` as its vector envs raise."""


class SpacesDifferError(ValueError, RuntimeError):
    """The envs of a pool have different spaces: a ``ValueError``, and a ``RuntimeError`` as gymnasium's vector envs
    raise."""


class EnvError(RuntimeError):
    """An env of the pool raised in ``step``/``reset``/a method call. The message names the env and carries its traceback.

    :param env_id: the env's id in the pool
    :param call: what the pool asked the env to do
    :param worker_traceback: the traceback formatted in the worker
    """

    def __init__(self, env_id: int, call: str, worker_traceback: str):
        self.env_id, self.call, self.worker_traceback = env_id, call, worker_traceback
        super().__init__(f"Env {env_id} of the AsyncEnvPool raised in {call}. Its traceback:\n{worker_traceback}")


class Workers(Protocol):
    """The worker groups outside this process (processes, Ray hosts), addressed by index."""

    def start(self, w: int, ids: list[int], factories_blob: bytes) -> None: ...
    def share(self, w: int, buffers: SharedBuffers, ids: list[int]) -> None: ...
    def step(self, w: int, ids: list[int] | None, restarts: dict[int, str] | None, buffers: SharedBuffers) -> None: ...
    def send(self, w: int, message: tuple[str, Any]) -> None: ...
    def receive(self, w: int, timeout: float | None) -> tuple[str, Any]: ...
    def ready(self, workers: Sequence[int], timeout: float | None) -> list[int]: ...
    def exitcode(self, w: int) -> int | None: ...
    def pid(self, w: int) -> int | None: ...
    def kill(self, w: int) -> None: ...
    def closer(self) -> tuple[Any, tuple[Any, ...]]: ...
    def close(self, timeout: float = 5.0) -> None: ...


class WorkerRespawned(Exception):
    """Internal: the worker read from was respawned (``on_error="restart"``); its pending work was resent."""


class PoolGroups:
    """``n_envs`` envs in groups, one per worker (then one in this process), and the bookkeeping shared by the jobs
    above: the steps in flight, their results and errors, the dead workers and the envs of respawned ones.

    :class:`~sb3_async.env_pool.core.EnvPoolBase` sets the options below, then calls :meth:`_lay_out_groups`.
    """

    n_envs: int
    n_workers: int
    local_envs: int
    autoreset: bool
    on_error: str
    start_method: str
    backend: str
    engine: str
    dead_agents: str
    _factories: list[Any]
    _observation_space: spaces.Space
    _action_space: spaces.Space
    _buffers: SharedBuffers

    def _lay_out_groups(self) -> None:
        """Split the ids into groups (contiguous blocks, one per worker, then this process's) and empty the
        bookkeeping."""
        self.possible_agents: list[int] = list(range(self.n_envs))
        self.agents: list[int] = list(self.possible_agents)
        # Groups of envs: one per worker, then this process's (the last local_envs ids), if any
        remote = np.arange(self.n_envs - self.local_envs)
        self._worker_ids = [list(map(int, part)) for part in np.array_split(remote, self.n_workers)] if self.n_workers else []
        if self.local_envs:
            self._worker_ids.append(list(range(self.n_envs - self.local_envs, self.n_envs)))
        self._local_group = self.n_workers if self.local_envs else None
        # The env copies of each group, as started; a multi-agent env's slots replace them in _worker_ids (_agent_slots)
        self._worker_copies = [list(ids) for ids in self._worker_ids]
        #: How many env copies the pool holds, and each copy's number of slots (its agents; 1 for a gymnasium env)
        self.n_env_copies, self.agents_per_env = self.n_envs, 1
        #: The agents of a multi-agent env (``possible_agents``; empty for a gymnasium env or a single agent): slot
        #: ``i`` is agent ``env_agents[i % agents_per_env]`` of env copy ``i // agents_per_env``
        self.env_agents: list[Any] = []
        self._worker_of = [w for w, ids in enumerate(self._worker_ids) for _ in ids]  # env id -> group
        self._every_group = dict(enumerate(self._worker_ids))
        self._local: Any = None  # an EnvWorker or an EnvPoolGroup
        self._buffers_list: list[SharedBuffers] = []
        #: The observation spaces of the envs whose space differs from env 0's in values only (bounds, counts), not in
        #: the layout of its values (:meth:`_check_spaces`)
        self._observation_spaces: dict[int, spaces.Space] = {}
        self._dead: dict[int, WorkerError] = {}
        # Step commands in flight per worker, answered in order: (send sequence number, the ids stepped)
        self._pending: list[deque[tuple[int, list[int]]]] = [deque() for _ in self._worker_ids]
        self._in_flight: dict[int, int] = {}  # env id -> send sequence number
        self._ready: dict[int, tuple[int, dict]] = {}  # env id -> (seq, info) of a step received, not returned yet
        self._errors: dict[int, str] = {}  # env id -> traceback of a step not yet reported
        self._lost: dict[int, str] = {}  # env id -> why its worker was respawned (reported at its next step)
        self._seq = 0
        self._closed = False
        self._workers: Workers | None = None

    def differing_observation_space(self) -> str | None:
        """None when every env has env 0's observation space, else which env's differs, and how."""
        for i, space in sorted(self._observation_spaces.items()):
            return f"env {i} has observation space {space}, env 0 has {self._observation_space}"
        return None

    @property
    def buffers(self) -> SharedBuffers:
        """The shared buffers: every env's observation, action, reward and end flags (the views read them)."""
        return self._buffers

    @property
    def workers(self) -> Workers | None:
        """The worker processes or Ray hosts (None when every env steps in this process)."""
        return self._workers

    def worker_pids(self) -> list[int | None]:
        """The process id of each worker process (None for a Ray host)."""
        assert self._workers is not None, "no worker processes: every env steps in this process"
        return [self._workers.pid(w) for w in range(self.n_workers)]

    def _check_spaces(self, data: list[tuple[int, spaces.Space, spaces.Space]], w: int) -> SharedBuffers:
        """Check group ``w``'s spaces (env 0's become the pool's) and return the buffers, made at the first group."""
        reported = [i for i, _, _ in data]
        if reported != self._worker_ids[w]:
            self._agent_slots(w, reported)
        for i, obs_space, act_space in data:
            if i == 0 and not self._buffers_list:  # the first env at start: a respawned worker 0 maps the same buffers
                self._observation_space, self._action_space = obs_space, act_space
                self._buffers = SharedBuffers(obs_space, act_space, self.n_envs, track_actions=True)
                self._buffers_list.append(self._buffers)
            elif obs_space != self._observation_space:
                if not same_layout(obs_space, self._observation_space):
                    raise SpacesDifferError(
                        f"Env {i} has observation space {obs_space}, env 0 has {self._observation_space}: the envs' "
                        "observations must have the same shapes and dtypes"
                    )
                self._observation_spaces[i] = obs_space
            elif act_space != self._action_space:
                raise SpacesDifferError(f"Env {i} has action space {act_space}, env 0 has {self._action_space}")
        return self._buffers

    def _agent_slots(self, w: int, reported: list[int]) -> None:
        """Group ``w`` holds a multi-agent env (:mod:`sb3_async.env_pool.multi_agent`) and reported its agents' slots:
        at the first group, every id becomes a slot id (copy ``c`` of ``n`` agents owns ``c * n .. c * n + n - 1``)."""
        copies = self._worker_copies[w]
        n = len(reported) // len(copies)
        expected = [c * n + a for c in copies for a in range(n)]
        if self._buffers_list or n < 1 or reported != expected:
            raise ValueError(
                f"The env copies {copies[0]}..{copies[-1]} report the slots {reported[0]}..{reported[-1]}, not those of the"
                f" other copies: every env copy must be the same kind of env (gymnasium or PettingZoo) with the same agents"
            )
        self.agents_per_env = n
        self._worker_ids = [[c * n + a for c in group for a in range(n)] for group in self._worker_copies]
        self.n_envs, self.local_envs = self.n_env_copies * n, self.local_envs * n
        self._worker_of = [g for g, ids in enumerate(self._worker_ids) for _ in ids]
        self._every_group = dict(enumerate(self._worker_ids))
        self.possible_agents = list(range(self.n_envs))
        self.agents = list(self.possible_agents)

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

    def _worker_name(self, w: int) -> str:
        ids = self._worker_ids[w]
        return f"env pool worker holding envs {ids[0]}..{ids[-1]}" if len(ids) > 1 else f"env pool worker of env {ids[0]}"

    def check_open(self) -> None:
        """Raise if the pool is closed."""
        if self._closed:
            raise PoolClosedError("This AsyncEnvPool is closed")

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
