"""The async env pool: ``n_envs`` copies of a Gymnasium env stepped concurrently in worker processes.

:class:`AsyncEnvPool` speaks three dialects over one engine:

* PettingZoo's ``ParallelEnv``: each env copy is an agent (ids ``0 .. n_envs - 1``), ``reset`` and ``step`` take and
  return dicts keyed by id;
* EnvPool's asynchronous ``send(actions)`` / ``recv(min_ready=k)``: act on whichever envs are ready (AE-DDPG §IV-A:
  "the actor acts on each simulator as soon as it is ready");
* an SB3 ``VecEnv`` through :meth:`AsyncEnvPool.as_vec_env` (stock PPO, A2C, TD3, SAC and DQN accept it), or a
  gymnasium ``VectorEnv`` through :meth:`AsyncEnvPool.as_gym_vector_env`.

The engine (:mod:`sb3_async.env_pool.core`): each worker process holds several envs when there are more envs than
cores (per-message overhead is what makes SB3's ``SubprocVecEnv`` slow on cheap envs); observations, actions, rewards
and end flags live in one anonymous shared mapping (:mod:`sb3_async.env_pool.buffers`: nothing is ever named in
``/dev/shm``) and a step costs one byte each way on the worker's pipe (:mod:`sb3_async.env_pool.processes`). With
``backend="ray"`` each group of envs lives in a Ray actor instead (:mod:`sb3_async.env_pool.ray_hosts`), with the same
worker code and the same logic above the transport. This module and the engine do not import torch, so neither do the
env workers; the views import their libraries when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sb3_async.env_pool.core import EnvPoolBase

if TYPE_CHECKING:
    from gymnasium.vector import AutoresetMode

    from sb3_async.env_pool.gym_vector import PoolVectorEnv
    from sb3_async.env_pool.vec_env import PoolVecEnv

__all__ = ["AsyncEnvPool"]


class AsyncEnvPool(EnvPoolBase):
    """``n_envs`` copies of a Gymnasium env stepped concurrently, addressed by id (PettingZoo's ``ParallelEnv`` shape),
    asynchronously (``send``/``recv``, EnvPool's shape), as an SB3 ``VecEnv`` (:meth:`as_vec_env`) or as a gymnasium
    ``VectorEnv`` (:meth:`as_gym_vector_env`).

    Each env copy is an agent of id ``0 .. n_envs - 1``; the workers hold contiguous blocks of ids.

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
        ``make_vec_env``); with a multi-agent env the pool has ``n_envs`` times its agents slots. ``n_workers`` and
        ``local_envs`` count env copies too
    :param env_kwargs: keyword arguments for ``gymnasium.make`` when ``env`` is an id
    :param n_workers: number of worker processes. Without ``n_workers`` and ``local_envs``, the pool times a few steps
        of an extra copy of its last env here and picks :func:`~sb3_async.env_pool.layout.default_layout`: every env
        in this process when the workers' share would step faster than a message round trip, else one process per
        core, this one included, each with an equal share (on 2 cores 1 worker and ``local_envs=n_envs // 2``); with
        ``backend="ray"``, ``min(n_envs, os.cpu_count())``. ``n_workers=n_envs`` for envs that wait rather than
        compute; ``0`` steps every env in this process, the fastest for envs cheaper than a message, as
        ``DummyVecEnv``, though ``send`` then blocks; ``send``/``recv`` pipelines whose main process has work of its
        own pass ``local_envs=0``
    :param local_envs: how many envs this process steps itself while the workers step the others (default: the layout
        above when neither is given, every env when ``n_workers=0``, else none). The last ``local_envs`` ids are stepped
        here, after the workers were sent theirs, so both run at once and this process works where it would wait;
        ``send`` then blocks while the local envs step. For synchronous stepping (a VecEnv) one process per core, this
        one included, is the fastest layout measured on 2 cores: ``n_workers=1, local_envs=n_envs // 2`` stepped
        1.32-1.86x ``DummyVecEnv`` on HalfCheetah and 1.52-1.68x on Pong, 0.84-1.59x on CartPole (docs/benchmarks.md,
        "AsyncEnvPool speed")
    :param autoreset: ``True`` (default): same-step autoreset, an env that ends is reset in its worker and the step
        returns the new episode's first observation, the last observation and info in ``infos[id]["final_obs"]`` and
        ``infos[id]["final_info"]`` (no discarded action, no fake transition, as SB3's VecEnvs); ``False``:
        PettingZoo's semantics, an env that ended leaves :attr:`agents` until :meth:`reset`. With a multi-agent env,
        per slot: a slot whose agent ended leaves :attr:`agents` (no padding) while its copy steps on with its live
        slots, and the copy waits for a :meth:`reset` naming all its slots (every possible agent must be present at
        reset). The VecEnv view needs ``True``
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
        :mod:`sb3_async.env_pool.envpool_engine` (``pip install "sb3-async[envpool]"``)
    :param agent_id: multi-agent envs only: append a one-hot of the agent's index to each slot's observation (1-D Box
        observations), so that the shared policy can tell the agents apart
    :param dead_agents: multi-agent envs only: what the slot of an agent that left the episode before the others gets;
        ``"pad"`` (default and only choice): zero observations and reward 0, its actions ignored, ``info["dead"]=True``,
        until its env copy starts its next episode
    """

    def as_vec_env(self) -> PoolVecEnv:
        """This pool as an SB3 ``VecEnv`` (it needs ``autoreset=True``, SB3's semantics); closing it closes the pool."""
        from sb3_async.env_pool.vec_env import PoolVecEnv

        return PoolVecEnv(self)

    def as_gym_vector_env(
        self, autoreset_mode: AutoresetMode | str = "NextStep", observation_mode: str | tuple[Any, Any] = "same"
    ) -> PoolVectorEnv:
        """This pool as a gymnasium ``VectorEnv`` (:class:`~sb3_async.env_pool.gym_vector.PoolVectorEnv`); closing it
        closes the pool.

        :param autoreset_mode: gymnasium's ``AutoresetMode`` or its value: ``"NextStep"`` (default, as gymnasium's
            vector envs) or ``"SameStep"`` (the pool's own, no step lost) with ``autoreset=True``; ``"Disabled"`` with
            ``autoreset=False`` (reset ended envs with ``reset(options={"reset_mask": mask})``)
        :param observation_mode: as gymnasium's vector envs: ``"same"`` (default), ``"different"`` (envs whose
            observation spaces differ in bounds or counts, not in the shapes and dtypes of their values) or a tuple
            ``(batch space, single space)``
        """
        from sb3_async.env_pool.gym_vector import PoolVectorEnv

        return PoolVectorEnv(self, autoreset_mode, observation_mode)

    def __enter__(self) -> AsyncEnvPool:
        return self
