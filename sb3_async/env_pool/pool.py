"""The async env pool: ``n_envs`` copies of a Gymnasium env stepped concurrently in env host processes.

It speaks three dialects over one engine: PettingZoo's ``ParallelEnv`` (``reset`` and ``step`` take and return dicts
keyed by env id), EnvPool's asynchronous ``send(actions)`` / ``recv(min_ready=k)`` (act on whichever envs are ready,
AE-DDPG §IV-A), and, through its views, an SB3 ``VecEnv`` (:meth:`AsyncEnvPool.as_vec_env`) or a gymnasium
``VectorEnv`` (:meth:`AsyncEnvPool.as_gym_vector_env`).

The pool is one object holding its collaborators, one module each: the layout of the envs in groups, their spaces and
the shared buffers (:class:`~sb3_async.env_pool.groups.EnvGroups`); the env hosts, processes
(:class:`~sb3_async.env_pool.process_hosts.ProcessHosts`) or Ray actors
(:class:`~sb3_async.env_pool.ray_hosts.RayEnvHosts`), and the group in this process
(:class:`~sb3_async.env_pool.host.EnvHost`, or EnvPool's threads); a host's start, messages, death and respawn
(:class:`~sb3_async.env_pool.supervisor.HostSupervisor`); the steps in flight
(:class:`~sb3_async.env_pool.step_book.StepBook`, :class:`~sb3_async.env_pool.steps.Steps`); resets and method calls
(:class:`~sb3_async.env_pool.remote.RemoteCalls`).

This module does not import torch, so neither do the env hosts; the views import their libraries when asked for.
"""

from __future__ import annotations

import importlib
import warnings
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from gymnasium import spaces

from sb3_async.env_pool.errors import PoolClosedError
from sb3_async.env_pool.groups import EnvGroups
from sb3_async.env_pool.host import SPIN_SECONDS, EnvFactory, EnvHost
from sb3_async.env_pool.options import check_behaviour, check_layout
from sb3_async.env_pool.remote import RemoteCalls
from sb3_async.env_pool.shared_buffers import SharedBuffers
from sb3_async.env_pool.step_book import StepBook
from sb3_async.env_pool.steps import StepDicts, Steps
from sb3_async.env_pool.supervisor import EnvHosts, HostSupervisor, make_hosts, release

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode, VectorEnv
    from stable_baselines3.common.vec_env import VecEnv

#: The views of the pool and their modules, imported by name when asked for (as the package's lazy exports are): they
#: import SB3 (so torch) or gymnasium's vector API, and they import this module, which must not import them back
VIEWS = {"PoolVecEnv": "sb3_async.env_pool.vec_env", "PoolVectorEnv": "sb3_async.env_pool.gym_vector"}


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated, use {new}: an env pool's processes are env hosts", DeprecationWarning, stacklevel=3)


class AsyncEnvPool:
    """``n_envs`` copies of a Gymnasium env stepped concurrently, addressed by id (PettingZoo's ``ParallelEnv`` shape),
    asynchronously (``send``/``recv``, EnvPool's shape), as an SB3 ``VecEnv`` (:meth:`as_vec_env`) or as a gymnasium
    ``VectorEnv`` (:meth:`as_gym_vector_env`).

    Each env copy is an agent of id ``0 .. n_envs - 1``; the env hosts hold contiguous blocks of ids.

    Multi-agent PettingZoo envs (a factory returning a ``ParallelEnv``, or an ``AECEnv`` PettingZoo can convert): every
    (env copy, agent) pair is one slot, with the slot's id in every dialect and its index in the VecEnv view, so that one
    shared policy acts for every agent. Copy ``c`` owns the slots ``c * n .. c * n + n - 1`` of its ``n`` agents
    (:attr:`env_agents` names them); :attr:`n_envs` is then the number of slots, :attr:`n_env_copies` that of copies. A
    copy steps when all its slots have actions (``send`` of part of a copy is an error). Agents that leave before the
    others are padded (zero observations, reward 0, ``info["dead"]``), agents with different spaces too
    (:mod:`sb3_async.env_pool.multi_agent` has the details). A turn-based game (an AEC env of ``pettingzoo.classic``)
    is one slot per copy, the learner's seat, its other seats played at random when the pool is used alone, by the
    policy when an algorithm trains on it (:class:`~sb3_async.env_pool.turns.TurnBasedGame`).

    :param env: an env id (built with ``gymnasium.make(env, **env_kwargs)``; ids registered in this process only, in
        a ``__main__`` module say, work too), an env (each env of the pool is a copy of it, made by pickling), a callable
        returning an env (or a PettingZoo env), or a list of such callables (one per env)
    :param n_envs: number of env copies (default: the length of ``env`` when it is a list, else 1, as SB3's
        ``make_vec_env``); with a multi-agent env the pool has ``n_envs`` times its agents slots. ``n_hosts`` and
        ``local_envs`` count env copies too
    :param env_kwargs: keyword arguments for ``gymnasium.make`` when ``env`` is an id (default: none)
    :param n_hosts: number of env hosts, the processes (or Ray actors) that step the envs, each holding a contiguous
        block of ids (at most ``n_envs``). ``0`` steps every env in this process (``send`` then blocks until they have
        stepped). Default, with ``backend="mp"`` and ``local_envs`` not given either: the pool times a few steps of an
        extra copy of its last env and picks :func:`~sb3_async.env_pool.layout.default_layout` (every env in this
        process when a host's share would step faster than a message round trip, else one process per core, this one
        included, each with an equal share); with ``backend="ray"`` or ``local_envs`` given, ``min(n_envs, cores)``
    :param n_workers: deprecated name of ``n_hosts`` (a ``DeprecationWarning``; an error if both are given)
    :param local_envs: how many envs (the last ids) this process steps itself, after it has sent the hosts theirs, so
        that both step at once; ``send`` then blocks while they step. Default: the layout above when neither it nor
        ``n_hosts`` is given, every env when ``n_hosts=0``, else none. At most ``n_envs - n_hosts``, so that each host
        holds an env
    :param autoreset: ``True`` (default): same-step autoreset, an env that ends is reset in its host and the step
        returns the new episode's first observation, the last observation and info in ``infos[id]["final_obs"]`` and
        ``infos[id]["final_info"]`` (no discarded action, no fake transition, as SB3's VecEnvs); ``False``:
        PettingZoo's semantics, an env that ended leaves :attr:`agents` until :meth:`reset`. With a multi-agent env,
        per slot: a slot whose agent ended leaves :attr:`agents` (no padding) while its copy steps on with its live
        slots, and the copy waits for a :meth:`reset` naming all its slots (every possible agent must be present at
        reset). The VecEnv view needs ``True``
    :param on_error: ``"raise"`` (default): an env that raises makes the next ``recv``/``step``/``reset`` raise
        :class:`~sb3_async.env_pool.errors.EnvError` naming it, with its traceback, the other envs unharmed; a host
        that dies makes its envs raise ``WorkerError``; ``"restart"``: the env is rebuilt (its host respawned if it
        died) and its episode reported truncated, the error in ``infos[id]["error"]``
    :param start_method: how host processes start: ``"forkserver"`` (default, as SB3's ``SubprocVecEnv``),
        ``"spawn"`` or ``"fork"``
    :param backend: where the hosts run: ``"mp"`` (default): processes on this machine, sharing memory with this one;
        ``"ray"``: each host is a Ray actor placed anywhere in a Ray cluster (``pip install "sb3-async[ray]"``), at
        least 1, spread over the nodes; observations travel in the replies instead of shared memory. A Ray host that
        dies (killed actor, lost node) is reported as a dead host process is (or started again, ``on_error="restart"``)
    :param backend_kwargs: ``backend="ray"`` only (default: none): ``address`` (default ``RAY_ADDRESS``, else a Ray
        initialized in this process, else a local Ray started for the pool and shut down at :meth:`close`),
        ``init_kwargs`` (for ``ray.init``), ``num_cpus_per_worker`` (Ray CPUs per host, default 1) and
        ``start_timeout`` (seconds, default 300)
    :param engine: ``"gymnasium"`` (default): gymnasium envs, in the hosts or this process; ``"envpool"``: EnvPool's
        C++ envs (``env`` an EnvPool id, ``env_kwargs`` for ``envpool.make``), stepped by EnvPool's threads in this
        process, with the pool's ids, dialects and autoreset semantics; ``send`` then blocks until the envs sent have
        stepped. Its differences (ids, Atari defaults, seeding, no per-env Python objects) are listed in
        :mod:`sb3_async.env_pool.envpool_engine` (``pip install "sb3-async[envpool]"``)
    :param agent_id: multi-agent envs only: append a one-hot of the agent's index to each slot's observation (1-D Box
        observations), so that the shared policy can tell the agents apart (default: False)
    :param dead_agents: multi-agent envs only: what the slot of an agent that left the episode before the others gets;
        ``"pad"`` (default and only choice): zero observations and reward 0, its actions ignored, ``info["dead"]=True``,
        until its env copy starts its next episode
    """

    metadata: dict[str, Any]

    def __init__(
        self,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        n_envs: int | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
        n_hosts: int | None = None,
        local_envs: int | None = None,
        autoreset: bool = True,
        on_error: str = "raise",
        start_method: str = "forkserver",
        backend: str = "mp",
        backend_kwargs: dict[str, Any] | None = None,
        engine: str = "gymnasium",
        agent_id: bool = False,
        dead_agents: str = "pad",
        n_workers: int | None = None,
    ):
        self._closed = False
        self._hosts: EnvHosts | None = None
        self._local: Any = None  # an EnvHost or an EnvPoolGroup: the envs this process steps
        if n_workers is not None:
            if n_hosts is not None:
                raise ValueError(f"Pass n_hosts={n_hosts} only: n_workers={n_workers} is its deprecated name")
            _deprecated("AsyncEnvPool(n_workers=...)", "n_hosts")
            n_hosts = n_workers
        layout = check_layout(env, n_envs, env_kwargs, n_hosts, local_envs, on_error, backend, engine, agent_id, dead_agents)
        check_behaviour(autoreset, on_error, start_method, backend, backend_kwargs, layout.n_hosts)
        self._factories = layout.factories
        self.autoreset, self.on_error, self.start_method = autoreset, on_error, start_method
        self.backend, self.engine, self.dead_agents = backend, engine, dead_agents
        self._groups = EnvGroups(len(self._factories), layout.n_hosts, layout.local_envs)
        self._book = StepBook(len(self._groups.ids))
        self._start_envs(env, env_kwargs, backend_kwargs)
        self._render_mode = self.get_attr("render_mode", [0])[0] if self._has("render_mode") else None
        self.metadata = {"render_modes": [] if self._render_mode is None else [self._render_mode], "is_parallelizable": True}

    def _start_envs(
        self,
        env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
        env_kwargs: dict[str, Any] | None,
        backend_kwargs: dict[str, Any] | None,
    ) -> None:
        """Start the hosts, build this process's envs while they start, then read each group's spaces (env 0's
        become the pool's) and share the buffers; on any failure, close what started."""
        groups = self._groups
        if groups.n_hosts:
            spin = SPIN_SECONDS if groups.local_envs else 0.0  # this process steps envs too: the next step follows at once
            self._hosts = make_hosts(
                self.backend, groups.n_hosts, self.start_method, self.autoreset, self.on_error, backend_kwargs, spin
            )
        # Runs at close(), at garbage collection or at exit, whichever comes first; holds no reference to the pool.
        closer = None if self._hosts is None else self._hosts.closer()
        self._finalizer = weakref.finalize(self, release, closer, groups.buffers_list, 5.0)
        supervisor = None
        if self._hosts is not None:
            supervisor = HostSupervisor(self._hosts, groups, self._book, self._factories, self.on_error)
        self._supervisor = supervisor
        try:
            for h in range(groups.n_hosts):
                assert supervisor is not None
                supervisor.start(h)
            if self.engine == "envpool":
                from sb3_async.env_pool.envpool_engine import EnvPoolGroup

                self._local = EnvPoolGroup(env, groups.n_envs, env_kwargs, self.autoreset)  # type: ignore[arg-type]
            elif groups.local is not None:  # built while the hosts start
                local_ids = groups.copies[groups.local]
                self._local = EnvHost(
                    local_ids, [self._factories[i] for i in local_ids], self.autoreset, self.on_error, copy_infos=True
                )
            for h in range(groups.n_hosts):  # host 0 first: env 0's spaces are the pool's
                assert supervisor is not None
                supervisor.handshake(h)
            if self._local is not None:
                self._local.buffers = groups.check_spaces(self._local.spaces, groups.n_hosts)
            self._steps = Steps(groups, self._book, supervisor, self._local, self.autoreset)
            self._remote = RemoteCalls(groups, self._steps, supervisor, self._local)
            if groups.agents_per_env > 1:
                groups.env_agents = list(self.get_attr("possible_agents", [0])[0])
        except BaseException as error:
            try:
                self.close()
            except Exception as close_error:  # the clean-up's own failure must not hide why the pool could not start
                if hasattr(error, "add_note"):
                    error.add_note(f"Closing the pool after this error also failed: {close_error!r}")
            raise

    # ---------------------------------------------------------------- layout and state
    @property
    def n_envs(self) -> int:
        """How many envs the pool steps (slots, with a multi-agent env: ``n_env_copies * agents_per_env``)."""
        return self._groups.n_envs

    @property
    def n_hosts(self) -> int:
        """How many env hosts (processes or Ray actors) step the envs; 0 when every env steps in this process."""
        return self._groups.n_hosts

    @property
    def n_workers(self) -> int:
        """Deprecated: :attr:`n_hosts`."""
        _deprecated("AsyncEnvPool.n_workers", "n_hosts")
        return self._groups.n_hosts

    @property
    def local_envs(self) -> int:
        """How many envs (the last ids) this process steps itself."""
        return self._groups.local_envs

    @property
    def n_env_copies(self) -> int:
        """How many env copies the pool holds (:attr:`n_envs` but with a multi-agent env)."""
        return self._groups.n_env_copies

    @property
    def agents_per_env(self) -> int:
        """Each env copy's number of slots (its agents; 1 for a gymnasium env)."""
        return self._groups.agents_per_env

    @property
    def env_agents(self) -> list[Any]:
        """The agents of a multi-agent env (empty for a gymnasium env): slot ``i`` is agent
        ``env_agents[i % agents_per_env]`` of env copy ``i // agents_per_env``."""
        return self._groups.env_agents

    @property
    def possible_agents(self) -> list[int]:
        """Every env id."""
        return self._groups.possible_agents

    @property
    def agents(self) -> list[int]:
        """The ids of the envs live now (with ``autoreset=False``, those that ended leave until :meth:`reset`)."""
        return self._groups.agents

    @property
    def buffers(self) -> SharedBuffers:
        """The shared buffers: every env's observation, action, reward and end flags (the views read them)."""
        return self._groups.buffers

    @property
    def hosts(self) -> EnvHosts | None:
        """The env hosts: processes or Ray actors (None when every env steps in this process)."""
        return self._hosts

    def host_pids(self) -> list[int | None]:
        """The process id of each env host process (None for a Ray host)."""
        assert self._hosts is not None, "no env host processes: every env steps in this process"
        return [self._hosts.pid(h) for h in range(self.n_hosts)]

    def worker_pids(self) -> list[int | None]:
        """Deprecated: :meth:`host_pids`."""
        _deprecated("AsyncEnvPool.worker_pids()", "host_pids()")
        return self.host_pids()

    def differing_observation_space(self) -> str | None:
        """None when every env has env 0's observation space, else which env's differs, and how."""
        return self._groups.differing_observation_space()

    def check_ids(self, ids: Iterable[Any], what: str) -> list[int]:
        """``ids`` as a list of env ids, each known and none repeated (``KeyError``/``ValueError`` naming ``what``)."""
        return self._groups.check_ids(ids, what)

    def check_whole_copies(self, ids: Iterable[int], what: str) -> None:
        """``ValueError`` unless ``ids`` hold every slot of each multi-agent env copy they touch."""
        self._groups.check_whole_copies(ids, what)

    def check_open(self) -> None:
        """Raise if the pool is closed."""
        if self._closed:
            raise PoolClosedError("This AsyncEnvPool is closed")

    # ---------------------------------------------------------------- steps
    def check_action(self, i: int, action: Any) -> Any:
        """``action`` for env ``i``, checked against the action space (``ValueError`` naming the env)."""
        return self._steps.check_action(i, action)

    def step(self, actions: dict[int, Any]) -> StepDicts:
        """Step the envs named in ``actions`` and wait for all of them.

        :return: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by the ids stepped
        """
        ids = self.send(actions)
        return self._steps.as_dicts(self._steps.collect(ids, None, len(ids), only=True))

    def send(self, actions: dict[int, Any]) -> list[int]:
        """Start a step of each env named in ``actions``; returns at once (with the ids sent).

        :raises KeyError: an unknown id; ``ValueError``: an action outside the action space, an env whose last step
            was not received yet, or (``autoreset=False``) an env that ended and was not reset since
        """
        self.check_open()
        return self._steps.send(actions)

    def send_all(self, actions: Any) -> None:
        """Start a step of every env with ``actions`` (a batch, checked by the caller), as a ``VecEnv`` does.

        :raises ValueError: an env has a step not received yet
        """
        self.check_open()
        self._steps.send_all(actions)

    def start_step(self, ids: list[int]) -> None:
        """Start a step of the envs ``ids`` (checked, none in flight), their actions already in :attr:`buffers`."""
        self._steps.start_step(ids)

    def recv(self, min_ready: int = 1, timeout: float | None = None) -> StepDicts:
        """The results of the envs whose step has finished: at least ``min_ready`` of them, every one ready by then,
        oldest send first (so no env starves).

        :param min_ready: how many finished envs to wait for (1 up to the number of steps sent and not received)
        :param timeout: seconds to wait at most (None: no limit); ``TimeoutError`` after it, the results kept
        :return: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by env id
        :raises EnvError: an env raised in its step (``on_error="raise"``); the other results are kept for the next recv
        """
        self.check_open()
        return self._steps.as_dicts(self._steps.recv(min_ready, timeout))

    def collect(self, wanted: Sequence[int], timeout: float | None, count: int, only: bool) -> list[tuple[int, dict]]:
        """Results until ``count`` of the ``wanted`` envs are done, as ``(id, info)`` (:meth:`Steps.collect
        <sb3_async.env_pool.steps.Steps.collect>`); the rest of each result is in :attr:`buffers`."""
        return self._steps.collect(wanted, timeout, count, only)

    def collect_every(self) -> dict[int, dict]:
        """Wait for the step of every env, sent together (:meth:`send_all`): the infos not empty, by id (the rest of
        each result is in :attr:`buffers`)."""
        return self._steps.collect_every()

    def discard(self, ids: Iterable[int]) -> None:
        """Wait for the steps in flight of ``ids`` (their hosts answer in order) and drop their results."""
        self._steps.discard(ids)

    @property
    def n_in_flight(self) -> int:
        """How many envs have a step sent and not received yet."""
        return len(self._book.in_flight)

    # ---------------------------------------------------------------- resets and method calls
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
        obs = self.buffers.obs
        observations = obs.read(reset_ids)
        return {i: obs.row(observations, k) for k, i in enumerate(reset_ids)}, {i: infos[i] for i in reset_ids}

    def reset_envs(
        self,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
        ids: Iterable[int] | None = None,
    ) -> dict[int, dict[str, Any]]:
        """:meth:`reset` with the observations left in :attr:`buffers` (what the views read); returns the infos."""
        self.check_open()
        return self._remote.reset(seed, options, ids)

    def _call(self, what: str, name: str, ids: Iterable[int] | None, *args: Any, **kwargs: Any) -> list[Any]:
        self.check_open()
        return self._remote.call(what, name, ids, *args, **kwargs)

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

    # ---------------------------------------------------------------- spaces, agents
    def observation_space(self, agent: int) -> spaces.Space:
        """The observation space of env ``agent`` (the same object at every call): env 0's for every env, but for envs
        whose spaces differ from it in values only (bounds, counts), not in the shapes and dtypes of their values."""
        self.check_ids([agent], "observation_space()")
        return self._groups.observation_spaces.get(agent, self._groups.observation_space)

    def action_space(self, agent: int) -> spaces.Space:
        """The action space of env ``agent`` (the same object for every env and every call)."""
        self.check_ids([agent], "action_space()")
        return self._groups.action_space

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
    def unwrapped(self) -> AsyncEnvPool:
        return self

    # ---------------------------------------------------------------- views
    def as_vec_env(self) -> VecEnv:
        """This pool as an SB3 ``VecEnv`` (a :class:`~sb3_async.env_pool.vec_env.PoolVecEnv`; it needs
        ``autoreset=True``, SB3's semantics); closing it closes the pool."""
        return importlib.import_module(VIEWS["PoolVecEnv"]).PoolVecEnv(self)

    def as_gym_vector_env(
        self, autoreset_mode: AutoresetMode | str = "NextStep", observation_mode: str | tuple[Any, Any] = "same"
    ) -> VectorEnv:
        """This pool as a gymnasium ``VectorEnv`` (:class:`~sb3_async.env_pool.gym_vector.PoolVectorEnv`); closing it
        closes the pool.

        :param autoreset_mode: gymnasium's ``AutoresetMode`` or its value: ``"NextStep"`` (default, as gymnasium's
            vector envs) or ``"SameStep"`` (the pool's own, no step lost) with ``autoreset=True``; ``"Disabled"`` with
            ``autoreset=False`` (reset ended envs with ``reset(options={"reset_mask": mask})``)
        :param observation_mode: as gymnasium's vector envs: ``"same"`` (default), ``"different"`` (envs whose
            observation spaces differ in bounds or counts, not in the shapes and dtypes of their values) or a tuple
            ``(batch space, single space)``
        """
        return importlib.import_module(VIEWS["PoolVectorEnv"]).PoolVectorEnv(self, autoreset_mode, observation_mode)

    # ---------------------------------------------------------------- lifecycle
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 5.0) -> None:
        """Stop the hosts and release everything. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._supervisor is not None:
            self._supervisor.closing = True
        self._finalizer.detach()
        try:
            if self._local is not None:
                self._local.close()
        finally:  # an env whose close() raised leaves no host or buffer behind
            try:
                if self._hosts is not None:
                    self._hosts.close(timeout)
            finally:
                for shared in self._groups.buffers_list:
                    shared.close()

    def __enter__(self) -> AsyncEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_envs={self.n_envs}, n_hosts={self.n_hosts}, local_envs={self.local_envs},"
            f" autoreset={self.autoreset}, backend={self.backend!r}, engine={self.engine!r})"
        )
