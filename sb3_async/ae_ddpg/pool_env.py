"""AE-DDPG's envs: whatever the user passes, as a :class:`~sb3_async.env_pool.vec_env.PoolVecEnv` over an
:class:`~sb3_async.env_pool.AsyncEnvPool` (§IV-A steps the envs asynchronously, so every env AE-DDPG trains on lives in
a pool), and what rebuilds it after ``load()``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.factories import pickled_env_factory
from sb3_async.env_pool.vec_env import PoolVecEnv

#: Number of envs of the paper's MuJoCo and L2R runs: 16 interaction threads (§V-B, §V-C).
PAPER_N_ENVS = 16


def make_pool_vec_env(
    env: Any, n_envs: int | None, pool_kwargs: dict[str, Any]
) -> tuple[PoolVecEnv, Callable[[], gym.Env] | str | None]:
    """The user's env as a :class:`PoolVecEnv` over an :class:`AsyncEnvPool`, and what rebuilds it after ``load()``.

    :param env: an env id, a factory, a ``gym.Env`` (copied by pickling), a ``DummyVecEnv`` (its first env copied, as
        many copies as it has envs), an ``AsyncEnvPool`` or its ``as_vec_env()``
    :param n_envs: number of envs; None: 16 (the paper) for ids, factories and envs, the given count for pools/VecEnvs
    :param pool_kwargs: for :class:`AsyncEnvPool` (``n_hosts``, ``start_method``, ``on_error``, ``env_kwargs``,
        ``backend``, ``backend_kwargs``)
    """
    source: Callable[[], gym.Env] | str | None
    if isinstance(env, AsyncEnvPool):
        env = PoolVecEnv(env)
    if isinstance(env, PoolVecEnv):
        given, source = env, None
    else:
        if isinstance(env, VecEnv):
            if type(env) is not DummyVecEnv:
                raise ValueError(
                    f"Invalid env={env!r}: AEDDPG steps its envs asynchronously in an AsyncEnvPool and can take a plain "
                    "DummyVecEnv (copied into the pool), an AsyncEnvPool (or its as_vec_env()), an env id or a factory; "
                    f"not a {type(env).__name__} (VecEnv wrappers such as VecNormalize are not supported)"
                )
            source, default_n_envs = pickled_env_factory(env.envs[0]), env.num_envs
        elif isinstance(env, str) or callable(env) and not isinstance(env, gym.Env):
            source, default_n_envs = env, PAPER_N_ENVS
        elif isinstance(env, gym.Env):
            source, default_n_envs = pickled_env_factory(env), PAPER_N_ENVS
        else:
            raise TypeError(f"Invalid env={env!r}: expected an env id, a factory, a gym.Env, a DummyVecEnv or an AsyncEnvPool")
        count = n_envs or default_n_envs
        if not {"n_hosts", "n_workers", "local_envs"} & set(pool_kwargs):
            # AE-DDPG's learner works while the envs step: none of them in this process, one env host per core at most
            pool_kwargs = {**pool_kwargs, "n_hosts": min(count, os.cpu_count() or 1), "local_envs": 0}
        given = PoolVecEnv(AsyncEnvPool(source, count, **pool_kwargs))
    copies = given.pool.n_env_copies  # a multi-agent env's copies (a slot per agent each), else its envs
    if n_envs is not None and copies != n_envs:
        if source is not None:  # built here: nobody else will close it
            given.close()
        raise ValueError(f"Invalid n_envs={n_envs}: the env given has {copies} envs")
    return given, source
