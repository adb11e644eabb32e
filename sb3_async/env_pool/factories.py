"""The pool's env factories: one callable per env copy, from an env id, an env (copied by pickling), a factory or a
list of factories. Each host builds its envs by calling them. This module does not import torch.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any

import cloudpickle
import gymnasium as gym

from sb3_async.env_pool.host import EnvFactory
from sb3_async.env_pool.multi_agent import is_multi_agent


def load_pickled_env(blob: bytes) -> gym.Env:
    """An env unpickled from ``blob`` (what :func:`pickled_env_factory`'s factories call)."""
    return cloudpickle.loads(blob)


def pickled_env_factory(env: Any) -> EnvFactory:
    """A factory of copies of ``env`` (each host unpickles its own)."""
    buffer = io.BytesIO()
    try:
        cloudpickle.CloudPickler(buffer).dump(env)
    except Exception as error:
        raise TypeError(f"Invalid env={env!r}: it cannot be copied to the env hosts (pickling failed: {error!r})") from error
    return functools.partial(load_pickled_env, buffer.getvalue())


def make_factories(
    env: str | gym.Env | EnvFactory | Sequence[EnvFactory], n_envs: int | None, env_kwargs: dict | None
) -> list[EnvFactory]:
    """One factory per env: from an env id (its spec looked up here, so that an id registered only in this process,
    in a ``__main__`` module, say, builds in the hosts too), an env (copied by pickling), a factory, or a list of
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
    if isinstance(env, gym.Env) or is_multi_agent(env):  # a PettingZoo env too: each copy a pickled one
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
