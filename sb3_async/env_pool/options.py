"""The pool's arguments checked, and its layout picked: how many env hosts, how many envs in this process.

:func:`check_layout` and :func:`check_behaviour` check :class:`~sb3_async.env_pool.pool.AsyncEnvPool`'s arguments, or
raise an error naming the argument at fault; nothing starts here but, for the default layout, one extra copy of the
last env, stepped a few times and closed. This module does not import torch.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from sb3_async.env_pool.factories import make_factories
from sb3_async.env_pool.host import EnvFactory
from sb3_async.env_pool.layout import default_layout, probe_step_seconds, synchronous_layout
from sb3_async.env_pool.multi_agent import DEAD_AGENTS, agent_slots_factory
from sb3_async.runtime.processes import START_METHODS
from sb3_async.validation import check_backend, check_int

ON_ERROR = ("raise", "restart")
#: What steps the envs: gymnasium envs in env hosts (or this process), or EnvPool's C++ envs and threads
#: (:mod:`sb3_async.env_pool.envpool_engine`).
ENGINES = ("gymnasium", "envpool")


@dataclass(frozen=True)
class PoolLayout:
    """Where the pool's envs step: one factory per env copy (None with EnvPool, which builds its envs), how many env
    hosts hold them and how many (the last ids) step in this process."""

    factories: list[Any]
    n_hosts: int
    local_envs: int


def check_layout(
    env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
    n_envs: int | None,
    env_kwargs: dict[str, Any] | None,
    n_hosts: int | None,
    local_envs: int | None,
    on_error: str,
    backend: str,
    engine: str,
    agent_id: bool,
    dead_agents: str,
) -> PoolLayout:
    """The env factories and the layout of :class:`~sb3_async.env_pool.pool.AsyncEnvPool`'s arguments, checked (with
    ``engine``, ``agent_id`` and ``dead_agents``, and the ``on_error`` and ``backend`` that EnvPool allows)."""
    if n_envs is not None:
        n_envs = check_int("n_envs", n_envs, 1)
    n_hosts = _check_engine(engine, env, n_envs, n_hosts, local_envs, on_error, backend)
    factories = _env_factories(engine, env, n_envs, env_kwargs, agent_id, dead_agents)
    return PoolLayout(factories, *_check_counts(factories, n_hosts, local_envs, backend, engine))


def _check_engine(
    engine: str,
    env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
    n_envs: int | None,
    n_hosts: int | None,
    local_envs: int | None,
    on_error: str,
    backend: str,
) -> int | None:
    """Check ``engine`` and the options it allows; returns ``n_hosts`` (0 with EnvPool: its threads step every env
    in this process)."""
    if engine not in ENGINES:
        raise ValueError(f"Invalid engine={engine!r}: expected one of {', '.join(ENGINES)}")
    if engine != "envpool":
        return n_hosts
    if not isinstance(env, str):
        raise TypeError(f"engine='envpool' builds EnvPool's envs from an env id (envpool.list_all_envs()): {env!r}")
    for name, value, allowed in (
        ("n_hosts", n_hosts, (None, 0)),
        ("local_envs", local_envs, (None, n_envs or 1)),
        ("on_error", on_error, ("raise",)),
        ("backend", backend, ("mp",)),
    ):
        if value not in allowed:
            raise ValueError(f"Invalid {name}={value!r} with engine='envpool': EnvPool's threads step every env")
    return 0


def _env_factories(
    engine: str,
    env: str | gym.Env | EnvFactory | Sequence[EnvFactory],
    n_envs: int | None,
    env_kwargs: dict[str, Any] | None,
    agent_id: bool,
    dead_agents: str,
) -> list[Any]:
    """One factory per env copy (None with EnvPool, which builds its envs), wrapped to report a multi-agent env's
    slots with ``agent_id``."""
    if engine == "envpool":
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
    return factories


def _check_counts(
    factories: list[Any], n_hosts: int | None, local_envs: int | None, backend: str, engine: str
) -> tuple[int, int]:
    """``(n_hosts, local_envs)``: every host holds an env, the rest step here. Neither given (host processes on this
    machine): :func:`~sb3_async.env_pool.layout.default_layout`, from the step time of an extra copy of the last env,
    built and closed here first."""
    n_envs = len(factories)
    if n_envs == 0:
        raise ValueError("At least one env factory is needed")
    if n_hosts is None and local_envs is None and backend == "mp" and engine == "gymnasium":
        step_seconds = probe_step_seconds(factories[-1]) if synchronous_layout(n_envs)[0] else None
        n_hosts, local_envs = default_layout(n_envs, step_seconds)
    elif n_hosts is None:
        n_hosts = min(n_envs, os.cpu_count() or 1)
    checked_hosts = check_int("n_hosts", n_hosts, 0)
    if checked_hosts > n_envs:
        raise ValueError(f"Invalid n_hosts={n_hosts}: at most n_envs={n_envs} env hosts")
    if local_envs is None:
        local_envs = n_envs if checked_hosts == 0 else 0
    checked_local = check_int("local_envs", local_envs, 0)
    if checked_hosts == 0 and checked_local != n_envs:
        raise ValueError(f"Invalid local_envs={local_envs} with n_hosts=0: every env is local (n_envs={n_envs})")
    if checked_hosts > 0 and checked_local > n_envs - checked_hosts:
        raise ValueError(
            f"Invalid local_envs={local_envs}: at most n_envs - n_hosts = {n_envs - checked_hosts}, so that "
            "each env host holds an env"
        )
    return checked_hosts, checked_local


def check_behaviour(
    autoreset: bool,
    on_error: str,
    start_method: str,
    backend: str,
    backend_kwargs: dict[str, Any] | None,
    n_hosts: int,
) -> None:
    """Check how the envs reset (``autoreset``) and fail (``on_error``), and where the hosts run."""
    if on_error not in ON_ERROR:
        raise ValueError(f"Invalid on_error={on_error!r}: expected one of {', '.join(ON_ERROR)}")
    if not isinstance(autoreset, bool):
        raise TypeError(f"autoreset must be a bool, got {autoreset!r}")
    if start_method not in START_METHODS:  # checked also when every env steps here (hosts may be restarted)
        raise ValueError(f"Invalid start_method={start_method!r}: expected one of {', '.join(START_METHODS)}")
    if backend == "serial":
        raise ValueError(
            "Invalid backend='serial' for an AsyncEnvPool: it is the algorithms' backend; a pool steps every env "
            "in this process with n_hosts=0"
        )
    check_backend(backend, backend_kwargs)
    if backend == "ray" and n_hosts == 0:
        raise ValueError("Invalid n_hosts=0 with backend='ray': the envs run in Ray actors, at least 1")
