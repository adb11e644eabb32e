"""The async env pool: ``n_envs`` copies of a Gymnasium env stepped concurrently in worker processes.

:class:`AsyncEnvPool` speaks three dialects over one engine:

* PettingZoo's ``ParallelEnv``: each env copy is an agent (ids ``0 .. n_envs - 1``), ``reset`` and ``step`` take and
  return dicts keyed by id;
* EnvPool's asynchronous ``send(actions)`` / ``recv(min_ready=k)``: act on whichever envs are ready (AE-DDPG §IV-A:
  "the actor acts on each simulator as soon as it is ready");
* an SB3 ``VecEnv`` through :meth:`AsyncEnvPool.as_vec_env` (stock PPO, A2C, TD3, SAC and DQN accept it).

Engine: each worker process holds several envs when there are more envs than cores (per-message overhead is what
makes SB3's ``SubprocVecEnv`` slow on cheap envs), writes observations into one anonymous shared mapping (``memfd``:
nothing is ever named in ``/dev/shm``) and sends rewards, flags and infos through its pipe, one message per command.
The worker side (a worker's envs and the commands they serve, the shared observation slots, the worker's entry point)
is :mod:`sb3_async.common.env_worker`; process handling (parent-death watch, worker errors) comes from
:mod:`sb3_async.common.runtime.processes`. This module does not import torch, so neither do the env workers.

``backend="ray"``: each group of envs lives in a Ray actor instead of a process, anywhere in a Ray cluster
(:mod:`sb3_async.common.runtime.ray_env`): the same ``EnvWorker`` serves the same commands, the observations come back
in the replies and are written into this process' slots as each reply is read, so everything above the transport
(ids, ``send``/``recv`` order, autoreset, errors and restarts) is the same code for both engines.
"""

from __future__ import annotations

import os
import time
import weakref
from collections import deque
from collections.abc import Iterable, Sequence
from functools import partial
from multiprocessing import reduction
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sb3_async.common.env_worker import FINAL_INFO, FINAL_OBS, EnvFactory, EnvWorker, Missing, SharedObs, env_worker_main
from sb3_async.common.runtime.processes import (
    WorkerError,
    process_context,
    start_process,
    stop_processes,
)
from sb3_async.common.validation import check_backend, check_int

if TYPE_CHECKING:
    from sb3_async.common.envpool_engine import EnvPoolGroup
    from sb3_async.common.pool_vec_env import PoolVecEnv
    from sb3_async.common.runtime.ray_env import RayEnvHosts

ON_ERROR = ("raise", "restart")
#: What steps the envs: gymnasium envs in worker processes (or this one), or EnvPool's C++ envs and threads
#: (:mod:`sb3_async.common.envpool_engine`).
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


# ----------------------------------------------------------------------------------------------------------------------
# Main-process side


def _make_factories(env: str | EnvFactory | Sequence[EnvFactory], n_envs: int | None, env_kwargs: dict | None) -> list:
    if isinstance(env, str):
        factory: EnvFactory = partial(gym.make, env, **(env_kwargs or {}))
        return [factory] * (1 if n_envs is None else n_envs)
    if callable(env):
        if env_kwargs:
            raise ValueError("env_kwargs applies to an env id only; pass them to your factory instead")
        return [env] * (1 if n_envs is None else n_envs)
    if isinstance(env, Sequence):
        factories = list(env)
        if not all(callable(fn) for fn in factories):
            raise TypeError("env must be an env id, a callable returning an env, or a list of such callables")
        if n_envs is not None and n_envs != len(factories):
            raise ValueError(f"n_envs={n_envs} but {len(factories)} env factories were given")
        if env_kwargs:
            raise ValueError("env_kwargs applies to an env id only; pass them to your factories instead")
        return factories
    raise TypeError(f"env must be an env id, a callable returning an env, or a list of such callables; got {env!r}")


def _shutdown(
    procs: list[Any],
    conns: list[Connection],
    pending: list[deque],
    obs: list[SharedObs],
    timeout: float,
    hosts: RayEnvHosts | None = None,
) -> None:
    """Stop the workers (idle ones politely, busy ones with SIGTERM, then SIGKILL; Ray hosts: see
    :meth:`RayEnvHosts.close`) and release pipes and shared memory.

    A function of its arguments only, so that a ``weakref.finalize`` can run it after the pool is garbage collected.
    """
    if hosts is not None:
        hosts.close(timeout)
    for proc, conn, busy in zip(procs, conns, pending):
        if proc is None or not proc.is_alive():
            continue
        if busy:  # mid-step: it would read "close" only after its step, however long that takes
            proc.terminate()
            continue
        try:
            conn.send(("close", None))
        except (OSError, ValueError):
            proc.terminate()
    procs = [proc for proc in procs if proc is not None]
    stop_processes(procs, timeout)
    for proc in procs:
        if not proc.is_alive():
            proc.close()
    for conn in conns:
        if conn is not None:
            conn.close()
    for shared in obs:
        shared.close()


class AsyncEnvPool:
    """``n_envs`` copies of a Gymnasium env stepped concurrently, addressed by id (PettingZoo's ``ParallelEnv`` shape),
    asynchronously (``send``/``recv``, EnvPool's shape) or as an SB3 ``VecEnv`` (:meth:`as_vec_env`).

    Each env copy is an agent of id ``0 .. n_envs - 1``; the workers hold contiguous blocks of ids.

    :param env: an env id (built with ``gymnasium.make(env, **env_kwargs)``), a callable returning an env, or a list of
        such callables (one per env)
    :param n_envs: number of env copies (default: the length of ``env`` when it is a list, else 1, as SB3's
        ``make_vec_env``)
    :param env_kwargs: keyword arguments for ``gymnasium.make`` when ``env`` is an id
    :param n_workers: number of worker processes (default: ``min(n_envs, os.cpu_count())``: several envs per process
        when there are more envs than cores, since each message between processes costs about as much as a cheap env
        step; ``n_workers=n_envs`` for envs that wait rather than compute; ``0`` steps every env in this process, the
        fastest for envs cheaper than a message, as ``DummyVecEnv``, though ``send`` then blocks)
    :param local_envs: how many envs this process steps itself while the workers step the others (default: every env
        when ``n_workers=0``, else none). The last ``local_envs`` ids are stepped here, after the workers were sent
        theirs, so both run at once and this process works where it would wait; ``send`` then blocks while the local
        envs step. Whether that beats ``n_workers=0`` depends on the envs and the machine: on 2 cores, with 8 envs,
        ``n_workers=1, local_envs=4`` was slower than ``n_workers=0`` on CartPole and HalfCheetah and within ±15 % of it
        on Pong (docs/benchmarks.md, "AsyncEnvPool speed")
    :param autoreset: ``True`` (default): same-step autoreset, an env that ends is reset in its worker and the step
        returns the new episode's first observation, the last observation and info in ``infos[id]["final_obs"]`` and
        ``infos[id]["final_info"]`` (no discarded action, no fake transition, as SB3's VecEnvs); ``False``:
        PettingZoo's semantics, an env that ended leaves :attr:`agents` until :meth:`reset`
    :param on_error: ``"raise"`` (default): an env that raises makes the next ``recv``/``step``/``reset`` raise
        :class:`EnvError` naming it, with its traceback, the other envs unharmed; ``"restart"``: the env is rebuilt
        (its process respawned if it died) and its episode reported truncated, the error in ``infos[id]["error"]``
    :param start_method: ``"forkserver"`` (default, as SB3's ``SubprocVecEnv``), ``"spawn"`` or ``"fork"``
    :param backend: ``"mp"`` (default): worker processes on this machine; ``"ray"``: each worker is a Ray actor (an
        env host) placed anywhere in a Ray cluster (``pip install "sb3-async[ray]"``), ``n_workers`` of them (at least
        1), spread over the nodes; observations travel in the replies instead of shared memory. A host that dies
        (killed actor, lost node) is reported as a dead worker process is (or started again, ``on_error="restart"``)
    :param backend_kwargs: ``backend="ray"``: ``address`` (default ``RAY_ADDRESS``, else a Ray initialized in this
        process, else a local Ray started for the pool and shut down at :meth:`close`), ``init_kwargs`` (for
        ``ray.init``), ``num_cpus_per_worker`` (Ray CPUs per host, 1) and ``start_timeout`` (seconds, 300)
    :param engine: ``"gymnasium"`` (default): gymnasium envs, in the worker processes or this one; ``"envpool"``:
        EnvPool's C++ envs (``env`` an EnvPool id, ``env_kwargs`` for ``envpool.make``), stepped by EnvPool's threads
        in this process, with the pool's ids, dialects and autoreset semantics; ``send`` then blocks until the envs
        sent have stepped. Its differences (ids, Atari defaults, seeding, no per-env Python objects) are listed in
        :mod:`sb3_async.common.envpool_engine` (``pip install "sb3-async[envpool]"``, Python 3.11 or earlier)
    """

    metadata: dict[str, Any]

    def __init__(
        self,
        env: str | EnvFactory | Sequence[EnvFactory],
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
            self._factories = _make_factories(env, n_envs, env_kwargs)
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
        self._ctx: Any = process_context(start_method)
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
        self._worker_of = [w for w, ids in enumerate(self._worker_ids) for _ in ids]  # env id -> group
        n_groups = len(self._worker_ids)
        self._local: EnvWorker | EnvPoolGroup | None = None
        self._procs: list[Any] = [None] * self.n_workers
        self._conns: list[Any] = [None] * self.n_workers
        self._obs_list: list[SharedObs] = []
        self._dead: dict[int, WorkerError] = {}
        # Step commands in flight per worker, answered in order: ("step", send sequence number).
        self._pending: list[deque[tuple[str, int]]] = [deque() for _ in range(n_groups)]
        self._in_flight: dict[int, int] = {}  # env id -> send sequence number
        self._ready: list[tuple[int, tuple]] = []  # (seq, (id, reward, terminated, truncated, info)) not yet returned
        self._errors: dict[int, str] = {}  # env id -> traceback of a step not yet reported
        self._lost: dict[int, str] = {}  # env id -> why its worker was respawned (reported at its next step)
        self._seq = 0
        self._closed = False
        self._hosts: RayEnvHosts | None = None
        if backend == "ray":  # connects to Ray (or starts a local one) now; ImportError with the hint without Ray
            from sb3_async.common.runtime.ray_env import RayEnvHosts

            self._hosts = RayEnvHosts(self.n_workers, **(backend_kwargs or {}))
        # Runs at close(), at garbage collection or at exit, whichever comes first; holds no reference to the pool.
        self._finalizer = weakref.finalize(
            self, _shutdown, self._procs, self._conns, self._pending, self._obs_list, 5.0, self._hosts
        )
        try:
            for w in range(self.n_workers):
                self._spawn(w)
            if engine == "envpool":
                from sb3_async.common.envpool_engine import EnvPoolGroup

                self._local = EnvPoolGroup(env, self.n_envs, env_kwargs, autoreset)  # type: ignore[arg-type]
            elif self._local_group is not None:  # built while the workers start
                local_ids = self._worker_ids[self._local_group]
                self._local = EnvWorker(local_ids, [self._factories[i] for i in local_ids], autoreset, on_error)
            for w in range(self.n_workers):  # worker 0 first: env 0's spaces are the pool's
                self._handshake(w)
                self._share(w)
            if self._local is not None:
                self._local.obs = self._check_spaces(self._local.spaces)
        except BaseException:
            self.close()
            raise
        self._render_mode = self.get_attr("render_mode", [0])[0] if self._has("render_mode") else None
        self.metadata = {"render_modes": [] if self._render_mode is None else [self._render_mode], "is_parallelizable": True}

    # ---------------------------------------------------------------- processes
    def _spawn(self, w: int) -> None:
        ids = self._worker_ids[w]
        blob = cloudpickle.dumps([self._factories[i] for i in ids])
        if self._hosts is not None:
            self._hosts.start(w, ids, blob, self.autoreset, self.on_error)
            return
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)  # duplex: a Unix socket, which can carry the fd
        proc = start_process(
            self._ctx,
            env_worker_main,
            f"sb3_async-env-pool-{w}",
            (w, ids, blob, child_conn, os.getpid(), self.autoreset, self.on_error),
        )
        child_conn.close()
        self._procs[w], self._conns[w] = proc, parent_conn

    def _handshake(self, w: int) -> None:
        """Read worker ``w``'s spaces (env 0's become the pool's; the others must be equal)."""
        _, data = self._receive(w, timeout=None)
        self._check_spaces(data)

    def _check_spaces(self, data: list[tuple[int, spaces.Space, spaces.Space]]) -> SharedObs:
        for i, obs_space, act_space in data:
            if i == 0 and not self._obs_list:  # the first env at start: a respawned worker 0 maps the same slots
                self._observation_space, self._action_space = obs_space, act_space
                self._obs = SharedObs(obs_space, self.n_envs)
                self._obs_list.append(self._obs)
            elif obs_space != self._observation_space:
                raise ValueError(f"Env {i} has observation space {obs_space}, env 0 has {self._observation_space}")
            elif act_space != self._action_space:
                raise ValueError(f"Env {i} has action space {act_space}, env 0 has {self._action_space}")
        return self._obs

    def _share(self, w: int) -> None:
        if self._hosts is not None:
            self._hosts.share(w, self._obs, self._worker_ids[w])
            return
        reduction.send_handle(self._conns[w], self._obs.fd, self._procs[w].pid)
        self._conns[w].send(self.n_envs)

    def _send_to(self, w: int, message: tuple[str, Any]) -> None:
        """Send ``message`` to worker ``w`` (``OSError`` if its pipe is broken; a Ray host's death shows in its reply)."""
        if self._hosts is not None:
            self._hosts.send(w, message)
        else:
            self._conns[w].send(message)

    def _worker_name(self, w: int) -> str:
        ids = self._worker_ids[w]
        return f"env pool worker holding envs {ids[0]}..{ids[-1]}" if len(ids) > 1 else f"env pool worker of env {ids[0]}"

    def _receive(self, w: int, timeout: float | None) -> tuple[str, Any]:
        """The next message of worker ``w``; raises :class:`WorkerError` if it died (seen within a second or less)."""
        if self._hosts is not None:
            kind, data = self._hosts.receive(w, timeout)
            if kind == "fatal":
                self._worker_died(w, data)
            elif kind == "died":
                self._worker_died(w, None, lost=data)
            return kind, data
        conn, proc = self._conns[w], self._procs[w]
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait([conn, proc.sentinel], timeout=left)
            if conn in ready:
                try:
                    kind, data = conn.recv()
                except (EOFError, OSError):
                    kind, data = "died", None
            elif proc.sentinel in ready:
                kind, data = "died", None
            elif deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            else:
                continue
            if kind == "fatal" or kind == "died":
                self._worker_died(w, data)
            return kind, data

    def _worker_died(self, w: int, worker_traceback: str | None, lost: str | None = None) -> None:
        """Worker ``w`` raised (``worker_traceback``) or died (a process; a Ray host: ``lost`` says how): respawn it
        (``on_error="restart"``, a death only) and raise :class:`_Respawned`, or mark it dead and raise its error."""
        proc = self._procs[w]
        if proc is not None:
            proc.join(timeout=1.0)
        exitcode = None if proc is None else proc.exitcode
        error = WorkerError(w, self._worker_name(w), exitcode, worker_traceback or lost)
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
        if self._hosts is not None:
            self._hosts.kill(w)
        else:
            self._procs[w].close()
            self._conns[w].close()
        self._spawn(w)
        self._handshake(w)
        self._share(w)
        arrived = {result[0] for _, result in self._ready} | set(self._errors)
        in_flight = [i for i in self._worker_ids[w] if i in self._in_flight and i not in arrived]
        self._pending[w].clear()
        for i in self._worker_ids[w]:
            self._lost[i] = why
        if in_flight:
            seq = self._in_flight[in_flight[0]]
            self._send_to(w, ("step", [(i, None, self._lost.pop(i)) for i in in_flight]))
            self._pending[w].append(("step", seq))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("This AsyncEnvPool is closed")

    # ---------------------------------------------------------------- ids and actions
    def _check_ids(self, ids: Iterable[Any], what: str) -> list[int]:
        checked = []
        for i in ids:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.n_envs:
                raise KeyError(f"Unknown env id {i!r} in {what}: the ids are 0..{self.n_envs - 1}")
            checked.append(int(i))
        if len(set(checked)) != len(checked):
            raise ValueError(f"Repeated env ids in {what}: {checked}")
        return checked

    def _check_action(self, i: int, action: Any) -> Any:
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

    # ---------------------------------------------------------------- PettingZoo ParallelEnv
    def observation_space(self, agent: int) -> spaces.Space:
        """The observation space of env ``agent`` (the same object for every env and every call)."""
        self._check_ids([agent], "observation_space()")
        return self._observation_space

    def action_space(self, agent: int) -> spaces.Space:
        """The action space of env ``agent`` (the same object for every env and every call)."""
        self._check_ids([agent], "action_space()")
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
    def unwrapped(self) -> AsyncEnvPool:
        return self

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
        self._check_open()
        targets = self.possible_agents if ids is None else self._check_ids(ids, "reset()")
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
        self._discard(targets)
        by_worker: dict[int, list[tuple[int, int | None, dict | None]]] = {}
        for i, s, o in zip(targets, seeds, all_options):
            by_worker.setdefault(self._worker_of[i], []).append((i, s, o))
        replies = self._sync("reset", by_worker)
        infos: dict[int, dict[str, Any]] = {}
        errors: dict[int, str] = {}
        for results, worker_errors in replies:
            infos.update(dict(results))
            errors.update(worker_errors)
        for i in targets:
            self._lost.pop(i, None)
        if errors:
            i = min(errors)
            raise EnvError(i, "reset()", errors[i])
        reset_ids = sorted(infos)
        observations = self._obs.read(reset_ids)
        if ids is None:
            self.agents = list(self.possible_agents)
        else:
            self.agents = sorted(set(self.agents) | set(reset_ids))
        return {i: self._item(observations, k) for k, i in enumerate(reset_ids)}, {i: infos[i] for i in reset_ids}

    def step(
        self, actions: dict[int, Any]
    ) -> tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]:
        """Step the envs named in ``actions`` and wait for all of them.

        :return: ``(observations, rewards, terminations, truncations, infos)``, dicts keyed by the ids stepped
        """
        ids = self.send(actions)
        return self._as_dicts(self._collect(set(ids), None, len(ids), only=True))

    # ---------------------------------------------------------------- EnvPool send / recv
    def send(self, actions: dict[int, Any]) -> list[int]:
        """Start a step of each env named in ``actions``; returns at once (with the ids sent).

        :raises KeyError: an unknown id; ``ValueError``: an action outside the action space, an env whose last step
            was not received yet, or (``autoreset=False``) an env that ended and was not reset since
        """
        self._check_open()
        if not isinstance(actions, dict) or not actions:
            raise ValueError(f"actions must be a non-empty dict {{env id: action}}, got {actions!r}")
        ids = self._check_ids(actions, "actions")
        self._send([(i, self._check_action(i, actions[i])) for i in ids])
        return ids

    def _send(self, items: list[tuple[int, Any]]) -> None:
        """Send checked actions ``(id, action)``, grouped into one message per worker."""
        # Every check before anything changes (this runs once per step of every env: kept lean)
        in_flight, worker_of = self._in_flight, self._worker_of
        by_worker: dict[int, list[tuple[int, Any, str | None]]] = {}
        for i, action in items:
            if i in in_flight:
                raise ValueError(f"Env {i} has a step not received yet: recv() it before sending it another action")
            by_worker.setdefault(worker_of[i], []).append((i, action, None))
        if not self.autoreset:
            for i, _ in items:
                if i not in self.agents:
                    raise ValueError(f"Env {i} has ended (terminated or truncated) and autoreset=False: reset() it first")
        for w in by_worker.keys() & self._dead.keys():
            raise self._dead[w]
        self._seq += 1
        in_flight.update(dict.fromkeys([i for i, _ in items], self._seq))
        if self._lost:  # envs of a respawned worker: their next step reports the truncation
            for work in by_worker.values():
                for k, (i, action, _) in enumerate(work):
                    work[k] = (i, action, self._lost.pop(i, None))
        for w, work in by_worker.items():
            if w != self._local_group and self._post(w, ("step", work)):
                self._pending[w].append(("step", self._seq))
            # else: local (stepped below, while the workers step theirs), or respawned (the respawn reports these
            # envs' steps truncated)
        if self._local is not None and self._local_group in by_worker:
            results, errors = self._local.step(by_worker[self._local_group])
            self._ready.extend((self._seq, result) for result in results)
            self._errors.update(errors)

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
        self._check_open()
        waiting = len(self._in_flight)
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or not 1 <= min_ready <= waiting:
            raise ValueError(f"Invalid min_ready={min_ready!r}: expected 1..{waiting} (the steps sent and not received)")
        return self._as_dicts(self._collect(set(self._in_flight), timeout, int(min_ready), only=False))

    def _collect(self, wanted: set[int], timeout: float | None, count: int, only: bool) -> list[tuple]:
        """Read step results until ``count`` of the ``wanted`` envs are done; take those (``only``) or every result
        ready, oldest send first, as ``(id, reward, terminated, truncated, info)``."""
        deadline = None if timeout is None else time.monotonic() + timeout

        def done() -> int:
            return sum(1 for _, result in self._ready if result[0] in wanted) + sum(1 for i in self._errors if i in wanted)

        while done() < count:
            busy = [w for w in range(len(self._pending)) if self._pending[w] and w not in self._dead]
            if not busy:
                break
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._hosts is not None:
                answered = self._hosts.ready(busy, left)
            else:
                ready = wait([self._conns[w] for w in busy] + [self._procs[w].sentinel for w in busy], timeout=left)
                answered = [w for w in busy if self._conns[w] in ready or self._procs[w].sentinel in ready]
            if not answered:
                raise TimeoutError(f"Fewer than {count} envs finished their step within {timeout} s (kept for later)")
            for w in answered:
                self._read_step(w)
        if not only and self._hosts is not None:  # whatever else is ready costs nothing to return now
            while busy := [w for w in range(len(self._pending)) if self._pending[w] and w not in self._dead]:
                answered = self._hosts.ready(busy, 0.0)
                if not answered:
                    break
                for w in answered:
                    self._read_step(w)
        elif not only:
            for w in range(len(self._pending)):
                while self._pending[w] and w not in self._dead and self._conns[w].poll():
                    self._read_step(w)
        errors = sorted(i for i in self._errors if i in wanted)
        if errors:
            i = errors[0]
            self._in_flight.pop(i, None)
            raise EnvError(i, "step()", self._errors.pop(i))
        self._ready.sort(key=lambda item: (item[0], item[1][0]))
        taken = [result for _, result in self._ready if not only or result[0] in wanted]
        self._ready = [item for item in self._ready if only and item[1][0] not in wanted]
        for result in taken:
            del self._in_flight[result[0]]
            if not self.autoreset and (result[2] or result[3]) and result[0] in self.agents:
                self.agents.remove(result[0])
        return taken

    def _as_dicts(
        self, taken: list[tuple]
    ) -> tuple[dict[int, Any], dict[int, float], dict[int, bool], dict[int, bool], dict[int, dict[str, Any]]]:
        observations = self._obs.read([result[0] for result in taken])
        obs, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for k, (i, reward, terminated, truncated, info) in enumerate(taken):
            obs[i] = self._item(observations, k)
            rewards[i], terminations[i], truncations[i], infos[i] = reward, terminated, truncated, info
        return obs, rewards, terminations, truncations, infos

    def _read_step(self, w: int) -> None:
        """Read worker ``w``'s next step result into the ready list (or respawn it, with ``on_error="restart"``)."""
        try:
            _, data = self._receive(w, timeout=None)
        except _Respawned:
            return
        _, seq = self._pending[w].popleft()
        results, errors = data
        self._ready.extend((seq, result) for result in results)
        self._errors.update(errors)

    def _discard(self, ids: Iterable[int]) -> None:
        """Wait for the steps in flight of ``ids`` (their workers answer in order) and drop their results."""
        targets = set(ids)
        for w in {self._worker_of[i] for i in targets if i in self._in_flight}:
            while self._pending[w] and w not in self._dead:
                self._read_step(w)
        self._ready = [item for item in self._ready if item[1][0] not in targets]
        for i in targets:
            self._errors.pop(i, None)
            self._in_flight.pop(i, None)

    def _item(self, observations: Any, k: int) -> Any:
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
                assert self._local is not None
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
            if self._post(w, message):
                return
        raise WorkerError(w, self._worker_name(w), getattr(self._procs[w], "exitcode", None), None)

    def _post(self, w: int, message: tuple[str, Any]) -> bool:
        """Send ``message`` to worker ``w``; False if it had died and was respawned (``on_error="restart"``)."""
        try:
            self._send_to(w, message)
            return True
        except OSError:  # a broken pipe: the worker died
            try:
                self._worker_died(w, None)
            except _Respawned:
                return False
            raise

    def _call(self, what: str, name: str, ids: Iterable[int] | None, *args: Any, **kwargs: Any) -> list[Any]:
        self._check_open()
        targets = self.possible_agents if ids is None else self._check_ids(ids, f"{what}({name!r})")
        by_worker: dict[int, Any] = {}
        for i in targets:
            by_worker.setdefault(self._worker_of[i], []).append(i)
        replies = self._sync("call", {w: (ids_w, what, name, args, kwargs) for w, ids_w in by_worker.items()})
        values: dict[int, Any] = {}
        for (_w, ids_w), (worker_values, errors) in zip(by_worker.items(), replies):
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

    # ---------------------------------------------------------------- SB3, lifecycle
    def as_vec_env(self) -> PoolVecEnv:
        """This pool as an SB3 ``VecEnv`` (it needs ``autoreset=True``, SB3's semantics)."""
        from sb3_async.common.pool_vec_env import PoolVecEnv

        return PoolVecEnv(self)

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
        _shutdown(self._procs, self._conns, self._pending, self._obs_list, timeout, self._hosts)

    def __enter__(self) -> AsyncEnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"AsyncEnvPool(n_envs={self.n_envs}, n_workers={self.n_workers}, local_envs={self.local_envs},"
            f" autoreset={self.autoreset},"
            f" backend={self.backend!r}, engine={self.engine!r})"
        )


class _Respawned(Exception):
    """Internal: the worker read from was respawned (``on_error="restart"``); its pending work was resent."""


__all__ = ["FINAL_INFO", "FINAL_OBS", "AsyncEnvPool", "EnvError", "EnvFactory", "SharedObs"]
