"""Where a pool's envs step by default: how many host processes, and how many envs in this process.

Stepping every env together (a VecEnv's ``step``), one process per core, this one included, each with an equal share
of the envs, keeps every core busy (:func:`synchronous_layout`). But handing a share to a host and collecting it
costs a message round trip, so envs whose share steps faster than that are better all stepped here, as
``DummyVecEnv`` does (:func:`default_layout`). The pool times a few steps of an extra copy of its last env in this
process to choose (:func:`probe_step_seconds`), and closes that copy.
"""

from __future__ import annotations

import os
import time
from typing import Any

import gymnasium as gym

from sb3_async.validation import check_int

__all__ = ["HANDOVER_SECONDS", "default_layout", "probe_step_seconds", "synchronous_layout"]

#: What handing a share of the envs to a host process and collecting its results costs, about: 50-100 µs measured
#: on 2 cores (the split layout's time over its slower half, CartPole-v1 and HalfCheetah-v5, 8 envs).
HANDOVER_SECONDS = 60e-6
#: How long the probe steps its env, at most (and at least 3 steps).
PROBE_SECONDS = 0.02


def synchronous_layout(n_envs: int, cpus: int | None = None) -> tuple[int, int]:
    """``(n_hosts, local_envs)`` for stepping ``n_envs`` envs synchronously on ``cpus`` cores (default: the cores this
    process may run on): one process per core, this one included, each with an equal share of the envs (the hosts
    take the remainder). While the hosts step, this process steps its share instead of waiting. One env or one
    core: every env in this process.
    """
    n_envs = check_int("n_envs", n_envs, 1)
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = min(n_envs, check_int("cpus", cpus, 1))
    if processes == 1:
        return 0, n_envs
    return processes - 1, n_envs // processes


def default_layout(n_envs: int, step_seconds: float | None, cpus: int | None = None) -> tuple[int, int]:
    """The pool's layout when neither ``n_hosts`` nor ``local_envs`` is given: :func:`synchronous_layout`, unless
    the hosts' share of the envs steps faster than :data:`HANDOVER_SECONDS` (``step_seconds``: one env step, None:
    unknown), then every env in this process (``(0, n_envs)``).
    """
    n_hosts, local_envs = synchronous_layout(n_envs, cpus)
    if n_hosts and step_seconds is not None and (n_envs - local_envs) * step_seconds < HANDOVER_SECONDS:
        return 0, n_envs
    return n_hosts, local_envs


def probe_step_seconds(factory: Any) -> float | None:
    """Build an env with ``factory``, time its steps with random actions (after one untimed step: one at least, then
    up to :data:`PROBE_SECONDS` or the end of its episode), close it; returns the mean seconds of one step (None for
    an env that is not a gymnasium ``Env``, a multi-agent one say, or that fails: the pool builds its own envs and
    reports their errors)."""
    try:
        env = factory()
    except Exception:  # noqa: BLE001  (a probe only: the pool's own build of this env reports the error)
        return None
    try:
        if not isinstance(env, gym.Env):
            return None
        env.reset()
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())  # untimed: a first step's one-off costs
        if terminated or truncated:
            env.reset()
        steps, start, ended = 0, time.perf_counter(), False
        while not ended and (steps == 0 or time.perf_counter() - start < PROBE_SECONDS and steps < 1000):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            steps, ended = steps + 1, bool(terminated or truncated)
        return (time.perf_counter() - start) / steps
    except Exception:  # noqa: BLE001
        return None
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()
