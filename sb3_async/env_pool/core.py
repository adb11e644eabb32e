"""The pool's engine-independent part: ids, the steps in flight, errors and restarts, over the worker groups.

:class:`EnvPoolBase` holds ``n_envs`` envs in groups: one per worker (a process, :mod:`sb3_async.env_pool.processes`;
or a Ray actor, :mod:`sb3_async.env_pool.ray_hosts`), then one in this process (an
:class:`~sb3_async.env_pool.worker.EnvWorker`, or EnvPool's threads, :mod:`sb3_async.env_pool.envpool_engine`). The
workers share one interface (``start``, ``share``, ``step``, ``send``, ``receive``, ``ready``, ``kill``, ``close``),
picked by :func:`make_workers`; the group in this process answers ``step``/``reset``/``call`` at once. Every step's
actions and results live in one :class:`~sb3_async.env_pool.buffers.SharedBuffers`.

:class:`~sb3_async.env_pool.AsyncEnvPool` adds the views that need other libraries (an SB3 ``VecEnv``, a gymnasium
``VectorEnv``). This module does not import torch.
"""

from __future__ import annotations

import functools
import io
import os
import time
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.buffers import SharedBuffers
from sb3_async.env_pool.multi_agent import DEAD_AGENTS, agent_slots_factory
from sb3_async.env_pool.processes import ProcessWorkers
from sb3_async.env_pool.worker import EnvFactory, EnvWorker, Missing
from sb3_async.runtime.processes import WorkerError
from sb3_async.validation import check_backend, check_int

__all__ = [
    "ENGINES",
    "ON_ERROR",
    "EnvError",
    "EnvPoolBase",
    "Workers",
    "load_pickled_env",
    "make_factories",
    "make_workers",
    "pickled_env_factory",
]

ON_ERROR = ("raise", "restart")
#: What steps the envs: gymnasium envs in worker processes (or this one), or EnvPool's C++ envs and threads
#: (:mod:`sb3_async.env_pool.envpool_engine`).
ENGINES = ("gymnasium", "envpool")


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


def make_workers(
    backend: str, n_workers: int, start_method: str, autoreset: bool, on_error: str, backend_kwargs: dict | None
) -> Workers:
    """The workers of a backend: processes on this machine (``"mp"``) or Ray actors (``"ray"``)."""
    if backend == "ray":  # connects to Ray (or starts a local one) now; ImportError with the hint without Ray
        from sb3_async.env_pool.ray_hosts import RayEnvHosts

        return RayEnvHosts(n_workers, autoreset, on_error, **(backend_kwargs or {}))
    return ProcessWorkers(n_workers, start_method, autoreset, on_error)


def load_pickled_env(blob: bytes) -> gym.Env:
    """An env unpickled from ``blob`` (what :func:`pickled_env_factory`'s factories call)."""
    return cloudpickle.loads(blob)


def pickled_env_factory(env: gym.Env) -> EnvFactory:
    """A factory of copies of ``env`` (each worker unpickles its own)."""
    buffer = io.BytesIO()
    try:
        cloudpickle.CloudPickler(buffer).dump(env)
    except Exception as error:
        raise TypeError(f"Invalid env={env!r}: it cannot be copied to the env workers (pickling failed: {error!r})") from error
    return functools.partial(load_pickled_env, buffer.getvalue())


def make_factories(
    env: str | gym.Env | EnvFactory | Sequence[EnvFactory], n_envs: int | None, env_kwargs: dict | None
) -> list[EnvFactory]:
    """One factory per env: from an env id (its spec looked up here, so that an id registered only in this process,
    in a ``__main__`` module, say, builds in the workers too), an env (copied by pickling), a factory, or a list of
    factories."""
    count = 1 if n_envs is None else n_envs
    if isinstance(env, str):
        try:
            spec = gym.spec(env)
        except gym.error.Error as error:
            raise ValueError(f"Invalid env={env!r}: {error}") from error
        return [functools.partial(gym.make, spec, **(env_kwargs or {}))] * count
    if env_kwargs:
        raise ValueError("env_kwargs applies to an env id only; pass them to your factory instead")
    if isinstance(env, gym.Env):
        return [pickled_env_factory(env)] * count
    if callable(env):
        return [env] * count
    if isinstance(env, Sequence):
        factories: list[Any] = list(env)
        if not all(callable(fn) and not isinstance(fn, gym.Env) for fn in factories):
            raise TypeError("env must be an env id, an env, a callable returning an env, or a list of such callables")
        if n_envs is not None and n_envs != len(factories):
            raise ValueError(f"n_envs={n_envs} but {len(factories)} env factories were given")
        return factories
    raise TypeError(f"env must be an env id, an env, a callable returning an env, or a list of such callables; got {env!r}")


def _release(closer: tuple[Any, tuple[Any, ...]] | None, buffers: list[SharedBuffers], timeout: float) -> None:
    """Stop the workers and release the shared buffers (what a finalizer of the pool runs: no reference to it)."""
    if closer is not None:
        function, args = closer
        function(*args, timeout)
    for shared in buffers:
        shared.close()


class _Respawned(Exception):
    """Internal: the worker read from was respawned (``on_error="restart"``); its pending work was resent."""


class EnvPoolBase:
    """``n_envs`` copies of a Gymnasium env stepped concurrently: the engine of :class:`~sb3_async.env_pool.AsyncEnvPool`
    (its parameters and dialects are documented there)."""

    metadata: dict[str, Any]

    def __init__(
        self,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        n_envs: int | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
        n_workers: int | None = None,
        local_envs: int | None = None,
        autoreset: bool = True,
        on_error: str = "raise",
        start_method: str = "forkserver",
        backend: str = "mp",
        backend_kwargs: dict[str, Any] | None = None,
        engine: str = "gymnasium",
        agent_id: bool = False,
        dead_agents: str = "pad",
    ):
        if n_envs is not None:
            n_envs = check_int("n_envs", n_envs, 1)
        if engine not in ENGINES:
            raise ValueError(f"Invalid engine={engine!r}: expected one of {', '.join(ENGINES)}")
        self.engine = engine
        if engine == "envpool":
            if not isinstance(env, str):
                raise TypeError(f"engine='envpool' builds EnvPool's envs from an env id (envpool.list_all_envs()): {env!r}")
            for name, value, allowed in (
                ("n_workers", n_workers, (None, 0)),
                ("local_envs", local_envs, (None, n_envs or 1)),
                ("on_error", on_error, ("raise",)),
                ("backend", backend, ("mp",)),
            ):
                if value not in allowed:
                    raise ValueError(f"Invalid {name}={value!r} with engine='envpool': EnvPool's threads step every env")
            n_workers = 0
            self._factories: list[Any] = [None] * (1 if n_envs is None else n_envs)
        else:
            self._factories = make_factories(env, n_envs, env_kwargs)
        if not isinstance(agent_id, bool):
            raise TypeError(f"agent_id must be a bool, got {agent_id!r}")
        if dead_agents not in DEAD_AGENTS:
            raise ValueError(
                f"Invalid dead_agents={dead_agents!r}: expected one of {', '.join(DEAD_AGENTS)} (agents that leave before"
                " the others observe zeros until their env copy's episode ends; masking them out is not supported)"
            )
        if agent_id:
            self._factories = [functools.partial(agent_slots_factory, factory) for factory in self._factories]
        self.dead_agents = dead_agents
        self.n_envs = len(self._factories)
        if self.n_envs == 0:
            raise ValueError("At least one env factory is needed")
        if n_workers is None:
            n_workers = min(self.n_envs, os.cpu_count() or 1)
        self.n_workers = check_int("n_workers", n_workers, 0)
        if self.n_workers > self.n_envs:
            raise ValueError(f"Invalid n_workers={n_workers}: at most n_envs={self.n_envs} workers")
        if local_envs is None:
            local_envs = self.n_envs if self.n_workers == 0 else 0
        self.local_envs = check_int("local_envs", local_envs, 0)
        if self.n_workers == 0 and self.local_envs != self.n_envs:
            raise ValueError(f"Invalid local_envs={local_envs} with n_workers=0: every env is local (n_envs={self.n_envs})")
        if self.n_workers > 0 and self.local_envs > self.n_envs - self.n_workers:
            raise ValueError(
                f"Invalid local_envs={local_envs}: at most n_envs - n_workers = {self.n_envs - self.n_workers}, so that "
                "each worker holds an env"
            )
        if on_error not in ON_ERROR:
            raise ValueError(f"Invalid on_error={on_error!r}: expected one of {', '.join(ON_ERROR)}")
        if not isinstance(autoreset, bool):
            raise TypeError(f"autoreset must be a bool, got {autoreset!r}")
        self.autoreset, self.on_error, self.start_method = autoreset, on_error, start_method
        check_backend(backend, backend_kwargs)
        if backend == "ray" and self.n_workers == 0:
            raise ValueError("Invalid n_workers=0 with backend='ray': the envs run in Ray actors, at least 1")
        self.backend = backend

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
        if self.n_workers:
            self._workers = make_workers(backend, self.n_workers, start_method, autoreset, on_error, backend_kwargs)
        # Runs at close(), at garbage collection or at exit, whichever comes first; holds no reference to the pool.
        closer = None if self._workers is None else self._workers.closer()
        self._finalizer = weakref.finalize(self, _release, closer, self._buffers_list, 5.0)
        try:
            for w in range(self.n_workers):
                self._start(w)
            if engine == "envpool":
                from sb3_async.env_pool.envpool_engine import EnvPoolGroup

                self._local = EnvPoolGroup(env, self.n_envs, env_kwargs, autoreset)  # type: ignore[arg-type]
            elif self._local_group is not None:  # built while the workers start
                local_ids = self._worker_copies[self._local_group]
                self._local = EnvWorker(
                    local_ids, [self._factories[i] for i in local_ids], autoreset, on_error, copy_infos=True
                )
            for w in range(self.n_workers):  # worker 0 first: env 0's spaces are the pool's
                self._handshake(w)
            if self._local is not None:
                self._local.buffers = self._check_spaces(self._local.spaces, self.n_workers)
            if self.agents_per_env > 1:
                self.env_agents = list(self.get_attr("possible_agents", [0])[0])
        except BaseException:
            self.close()
            raise
        self._render_mode = self.get_attr("render_mode", [0])[0] if self._has("render_mode") else None
        self.metadata = {"render_modes": [] if self._render_mode is None else [self._render_mode], "is_parallelizable": True}

    # ---------------------------------------------------------------- workers
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

    def _check_spaces(self, data: list[tuple[int, spaces.Space, spaces.Space]], w: int) -> SharedBuffers:
        """Check group ``w``'s spaces (env 0's become the pool's) and return the buffers, made at the first group."""
        reported = [i for i, _, _ in data]
        if reported != self._worker_ids[w]:
            self._agent_slots(w, reported)
        for i, obs_space, act_space in data:
            if i == 0 and not self._buffers_list:  # the first env at start: a respawned worker 0 maps the same buffers
                self._observation_space, self._action_space = obs_space, act_space
                self._buffers = SharedBuffers(obs_space, act_space, self.n_envs)
                self._buffers_list.append(self._buffers)
            elif obs_space != self._observation_space:
                raise ValueError(f"Env {i} has observation space {obs_space}, env 0 has {self._observation_space}")
            elif act_space != self._action_space:
                raise ValueError(f"Env {i} has action space {act_space}, env 0 has {self._action_space}")
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

    def _receive(self, w: int, timeout: float | None) -> tuple[str, Any]:
        """The next reply of worker ``w``; raises :class:`WorkerError` if it died (or :class:`_Respawned`)."""
        assert self._workers is not None
        kind, data = self._workers.receive(w, timeout)
        if kind == "fatal":
            self._worker_died(w, data)
        elif kind == "died":
            self._worker_died(w, None, lost=data)
        return kind, data

    def _worker_died(self, w: int, worker_traceback: str | None, lost: str | None = None) -> None:
        """Worker ``w`` raised (``worker_traceback``) or died (a Ray host: ``lost`` says how): respawn it
        (``on_error="restart"``, a death only) and raise :class:`_Respawned`, or mark it dead and raise its error."""
        assert self._workers is not None
        error = WorkerError(w, self._worker_name(w), self._workers.exitcode(w), worker_traceback or lost)
        if self.on_error == "restart" and worker_traceback is None and not self._closed:
            self._respawn(w, str(error))
            raise _Respawned
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
            except _Respawned:
                return False
            raise

    def _restarts(self, ids: list[int]) -> dict[int, str] | None:
        """The envs of ``ids`` whose worker was respawned since their last step, and why (taken: reported once)."""
        if not self._lost:
            return None
        return {i: self._lost.pop(i) for i in ids if i in self._lost} or None

    def check_open(self) -> None:
        """Raise if the pool is closed."""
        if self._closed:
            raise RuntimeError("This AsyncEnvPool is closed")

    # ---------------------------------------------------------------- ids and actions
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

    # ---------------------------------------------------------------- spaces, agents
    def observation_space(self, agent: int) -> spaces.Space:
        """The observation space of env ``agent`` (the same object for every env and every call)."""
        self.check_ids([agent], "observation_space()")
        return self._observation_space

    def action_space(self, agent: int) -> spaces.Space:
        """The action space of env ``agent`` (the same object for every env and every call)."""
        self.check_ids([agent], "action_space()")
        return self._action_space

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def max_num_agents(self) -> int:
        return self.n_envs

    @property
    def render_mode(self) -> str | None:
        return self._render_mode

    @property
    def unwrapped(self) -> EnvPoolBase:
        return self

    # ---------------------------------------------------------------- reset
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
        return {i: self._item(observations, k) for k, i in enumerate(reset_ids)}, {i: infos[i] for i in reset_ids}

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

    # ---------------------------------------------------------------- steps
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
        self.check_whole_copies(ids, "actions")
        self._check_sendable(ids)
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
                    raise ValueError(f"Env {i} has ended (terminated or truncated) and autoreset=False: reset() it first")

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

    def _take(self, seq: int, ids: list[int], infos: dict[int, dict], errors: dict[int, str]) -> None:
        ready = self._ready
        for i in ids:
            if i in errors:
                self._errors[i] = errors[i]
            else:
                ready[i] = (seq, infos.get(i) or {})

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
            obs[i], infos[i] = self._item(observations, k), info
        return (
            obs,
            dict(zip(ids, rewards)),
            dict(zip(ids, terminated.tolist())),
            dict(zip(ids, truncated.tolist())),
            infos,
        )

    def _read_step(self, w: int) -> None:
        """Read worker ``w``'s next step result (or respawn it, with ``on_error="restart"``)."""
        try:
            _, data = self._receive(w, timeout=None)
        except _Respawned:
            return
        seq, ids = self._pending[w].popleft()
        infos, errors = data
        self._take(seq, ids, infos, errors)

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

    @staticmethod
    def _item(observations: Any, k: int) -> Any:
        if isinstance(observations, dict):
            return {key: value[k] for key, value in observations.items()}
        if isinstance(observations, tuple):
            return tuple(value[k] for value in observations)
        return observations[k]

    # ---------------------------------------------------------------- synchronous commands
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
            except _Respawned:  # died before answering: ask its replacement
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

    # ---------------------------------------------------------------- lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers and release everything. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._finalizer.detach()
        if self._local is not None:
            self._local.close()
        if self._workers is not None:
            self._workers.close(timeout)
        for shared in self._buffers_list:
            shared.close()

    def __enter__(self) -> EnvPoolBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_envs={self.n_envs}, n_workers={self.n_workers}, local_envs={self.local_envs},"
            f" autoreset={self.autoreset}, backend={self.backend!r}, engine={self.engine!r})"
        )
