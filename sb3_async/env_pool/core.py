"""The pool's engine-independent part: ids, the steps in flight, errors and restarts, over the worker groups.

:class:`EnvPoolBase` holds ``n_envs`` envs in groups: one per worker (a process, :mod:`sb3_async.env_pool.processes`;
or a Ray actor, :mod:`sb3_async.env_pool.ray_hosts`), then one in this process (an
:class:`~sb3_async.env_pool.worker.EnvWorker`, or EnvPool's threads, :mod:`sb3_async.env_pool.envpool_engine`). The
workers share one interface (:class:`~sb3_async.env_pool.groups.Workers`: ``start``, ``share``, ``step``, ``send``,
``receive``, ``ready``, ``kill``, ``close``), picked by :func:`make_workers`; the group in this process answers
``step``/``reset``/``call`` at once. Every step's actions and results live in one
:class:`~sb3_async.env_pool.buffers.SharedBuffers`.

The engine's jobs build on each other, one module each: the groups and their state (:mod:`~sb3_async.env_pool.groups`),
a worker's start, death and respawn (:mod:`~sb3_async.env_pool.crashes`), the steps in flight
(:mod:`~sb3_async.env_pool.steps`), resets and method calls (:mod:`~sb3_async.env_pool.remote`); this module adds the
construction (the options checked, the envs started) and the lifecycle.

:class:`~sb3_async.env_pool.AsyncEnvPool` adds the views that need other libraries (an SB3 ``VecEnv``, a gymnasium
``VectorEnv``). This module does not import torch.
"""

from __future__ import annotations

import functools
import io
import os
import weakref
from collections.abc import Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
from gymnasium import spaces

from sb3_async.env_pool.buffers import SharedBuffers
from sb3_async.env_pool.groups import EnvError, Workers
from sb3_async.env_pool.layout import default_layout, probe_step_seconds, synchronous_layout
from sb3_async.env_pool.multi_agent import DEAD_AGENTS, agent_slots_factory
from sb3_async.env_pool.processes import ProcessWorkers
from sb3_async.env_pool.remote import RemoteCalls
from sb3_async.env_pool.worker import SPIN_SECONDS, EnvFactory, EnvWorker
from sb3_async.runtime.processes import START_METHODS
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
    "synchronous_layout",
]

ON_ERROR = ("raise", "restart")
#: What steps the envs: gymnasium envs in worker processes (or this one), or EnvPool's C++ envs and threads
#: (:mod:`sb3_async.env_pool.envpool_engine`).
ENGINES = ("gymnasium", "envpool")


def make_workers(
    backend: str,
    n_workers: int,
    start_method: str,
    autoreset: bool,
    on_error: str,
    backend_kwargs: dict | None,
    spin_seconds: float = 0.0,
) -> Workers:
    """The workers of a backend: processes on this machine (``"mp"``, polling ``spin_seconds`` for each command before
    they block) or Ray actors (``"ray"``)."""
    if backend == "ray":  # connects to Ray (or starts a local one) now; ImportError with the hint without Ray
        from sb3_async.env_pool.ray_hosts import RayEnvHosts

        return RayEnvHosts(n_workers, autoreset, on_error, **(backend_kwargs or {}))
    return ProcessWorkers(n_workers, start_method, autoreset, on_error, spin_seconds)


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


class EnvPoolBase(RemoteCalls):
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
        n_workers = self._check_engine(engine, env, n_envs, n_workers, local_envs, on_error, backend)
        self._factories = self._env_factories(env, n_envs, env_kwargs, agent_id, dead_agents)
        self._check_workers(n_workers, local_envs, backend)
        self._check_options(autoreset, on_error, start_method, backend, backend_kwargs)
        self._lay_out_groups()
        self._start_envs(env, env_kwargs, backend_kwargs)
        self._render_mode = self.get_attr("render_mode", [0])[0] if self._has("render_mode") else None
        self.metadata = {"render_modes": [] if self._render_mode is None else [self._render_mode], "is_parallelizable": True}

    # ---------------------------------------------------------------- construction
    def _check_engine(
        self,
        engine: str,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        n_envs: int | None,
        n_workers: int | None,
        local_envs: int | None,
        on_error: str,
        backend: str,
    ) -> int | None:
        """Check ``engine`` and the options it allows; returns ``n_workers`` (0 with EnvPool: its threads step every
        env in this process)."""
        if engine not in ENGINES:
            raise ValueError(f"Invalid engine={engine!r}: expected one of {', '.join(ENGINES)}")
        self.engine = engine
        if engine != "envpool":
            return n_workers
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
        return 0

    def _env_factories(
        self,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        n_envs: int | None,
        env_kwargs: dict[str, Any] | None,
        agent_id: bool,
        dead_agents: str,
    ) -> list[Any]:
        """One factory per env copy (None with EnvPool, which builds its envs), wrapped to report a multi-agent env's
        slots with ``agent_id``."""
        if self.engine == "envpool":
            factories: list[Any] = [None] * (1 if n_envs is None else n_envs)
        else:
            factories = make_factories(env, n_envs, env_kwargs)
        if not isinstance(agent_id, bool):
            raise TypeError(f"agent_id must be a bool, got {agent_id!r}")
        if dead_agents not in DEAD_AGENTS:
            raise ValueError(
                f"Invalid dead_agents={dead_agents!r}: expected one of {', '.join(DEAD_AGENTS)} (agents that leave before"
                " the others observe zeros until their env copy's episode ends; masking them out is not supported)"
            )
        if agent_id:
            factories = [functools.partial(agent_slots_factory, factory) for factory in factories]
        self.dead_agents = dead_agents
        return factories

    def _check_workers(self, n_workers: int | None, local_envs: int | None, backend: str) -> None:
        """Set ``n_envs``, ``n_workers`` and ``local_envs``: every worker holds an env, the rest step here. Neither given
        (worker processes on this machine): :func:`~sb3_async.env_pool.layout.default_layout`, from the step time of
        an extra copy of the last env, built and closed here first."""
        self.n_envs = len(self._factories)
        if self.n_envs == 0:
            raise ValueError("At least one env factory is needed")
        if n_workers is None and local_envs is None and backend == "mp" and self.engine == "gymnasium":
            step_seconds = probe_step_seconds(self._factories[-1]) if synchronous_layout(self.n_envs)[0] else None
            n_workers, local_envs = default_layout(self.n_envs, step_seconds)
        elif n_workers is None:
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

    def _check_options(
        self, autoreset: bool, on_error: str, start_method: str, backend: str, backend_kwargs: dict[str, Any] | None
    ) -> None:
        """Set how the envs reset and fail, and where the workers run."""
        if on_error not in ON_ERROR:
            raise ValueError(f"Invalid on_error={on_error!r}: expected one of {', '.join(ON_ERROR)}")
        if not isinstance(autoreset, bool):
            raise TypeError(f"autoreset must be a bool, got {autoreset!r}")
        if start_method not in START_METHODS:  # checked also when every env steps here (workers may be restarted)
            raise ValueError(f"Invalid start_method={start_method!r}: expected one of {', '.join(START_METHODS)}")
        self.autoreset, self.on_error, self.start_method = autoreset, on_error, start_method
        if backend == "serial":
            raise ValueError(
                "Invalid backend='serial' for an AsyncEnvPool: it is the algorithms' backend; a pool steps every env "
                "in this process with n_workers=0"
            )
        check_backend(backend, backend_kwargs)
        if backend == "ray" and self.n_workers == 0:
            raise ValueError("Invalid n_workers=0 with backend='ray': the envs run in Ray actors, at least 1")
        self.backend = backend

    def _start_envs(
        self,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        env_kwargs: dict[str, Any] | None,
        backend_kwargs: dict[str, Any] | None,
    ) -> None:
        """Start the workers, build this process's envs while they start, then read each group's spaces (env 0's
        become the pool's) and share the buffers; on any failure, close what started."""
        if self.n_workers:
            spin = SPIN_SECONDS if self.local_envs else 0.0  # this process steps envs too: the next step follows at once
            self._workers = make_workers(
                self.backend, self.n_workers, self.start_method, self.autoreset, self.on_error, backend_kwargs, spin
            )
        # Runs at close(), at garbage collection or at exit, whichever comes first; holds no reference to the pool.
        closer = None if self._workers is None else self._workers.closer()
        self._finalizer = weakref.finalize(self, _release, closer, self._buffers_list, 5.0)
        try:
            for w in range(self.n_workers):
                self._start(w)
            if self.engine == "envpool":
                from sb3_async.env_pool.envpool_engine import EnvPoolGroup

                self._local = EnvPoolGroup(env, self.n_envs, env_kwargs, self.autoreset)  # type: ignore[arg-type]
            elif self._local_group is not None:  # built while the workers start
                local_ids = self._worker_copies[self._local_group]
                self._local = EnvWorker(
                    local_ids, [self._factories[i] for i in local_ids], self.autoreset, self.on_error, copy_infos=True
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

    # ---------------------------------------------------------------- spaces, agents
    def observation_space(self, agent: int) -> spaces.Space:
        """The observation space of env ``agent`` (the same object at every call): env 0's for every env, but for envs
        whose spaces differ from it in values only (bounds, counts), not in the shapes and dtypes of their values."""
        self.check_ids([agent], "observation_space()")
        return self._observation_spaces.get(agent, self._observation_space)

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
