"""AE-DDPG's arguments: the checks ``AEDDPG`` runs before it starts any env process (so that a bad argument costs no
process start and leaks none), and the paper's default that depends on them, rho.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer

from sb3_async.ae_ddpg.pool_env import PAPER_N_ENVS
from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.validation import check_backend, check_float, check_int

#: The paper's range of rho, the probability of sampling from HMemory, "tuned according to the number of interaction
#: threads" (§V-B).
RHO_RANGE = (0.05, 0.25)


def rho_for_n_envs(n_envs: int) -> float:
    """Our mapping of the number of envs to rho (the paper gives the range [0.05, 0.25] and says it grows with the
    number of threads, not the values): linear from 0.05 with 1 env to 0.25 with 16 envs (the paper's count), 0.25 above.

    :param n_envs: number of envs stepped asynchronously
    """
    n_envs = check_int("n_envs", n_envs)
    low, high = RHO_RANGE
    return low + (high - low) * (min(n_envs, PAPER_N_ENVS) - 1) / (PAPER_N_ENVS - 1)


def check_updates_per_transition(updates_per_transition: Any, gradient_steps: Any) -> float:
    """``updates_per_transition`` as a float > 0, only with ``gradient_steps=-1`` (the only count it scales)."""
    ratio = check_float("updates_per_transition", updates_per_transition)
    if ratio == 0:
        raise ValueError(f"Invalid updates_per_transition={updates_per_transition!r}: expected a positive finite number")
    if ratio != 1.0 and not (isinstance(gradient_steps, (int, np.integer)) and gradient_steps < 0):
        raise ValueError(
            f"Invalid updates_per_transition={updates_per_transition!r} with gradient_steps={gradient_steps!r}: "
            "it scales gradient_steps=-1 (one update per transition) only"
        )
    return ratio


def check_pool_arguments(pool_kwargs: Any, backend: Any, backend_kwargs: Any) -> None:
    """The pool's arguments, checked before any env process starts; Ray's absence said now, not at the first
    ``learn()``."""
    if pool_kwargs is not None and not isinstance(pool_kwargs, dict):
        raise TypeError(f"Invalid pool_kwargs={pool_kwargs!r}: expected a dict or None")
    check_backend(backend, backend_kwargs)
    if pool_kwargs and {"backend", "backend_kwargs"} & set(pool_kwargs):
        raise ValueError("Invalid pool_kwargs: pass backend and backend_kwargs to AEDDPG itself, not in pool_kwargs")
    for name in ("n_hosts", "n_workers"):  # n_workers: the pool's deprecated name of n_hosts
        n_hosts = (pool_kwargs or {}).get(name)
        if backend == "serial" and n_hosts not in (None, 0):
            raise ValueError(
                f"Invalid pool_kwargs {name}={n_hosts!r} with backend='serial': its envs step in this "
                "process (n_hosts=0); use backend='mp' for env processes"
            )
    if backend == "ray":
        from sb3_async.runtime.ray_connect import import_ray

        import_ray()


def check_replay_and_noise(replay_buffer_class: Any, action_noise: Any) -> type[ReplayBuffer]:
    """The replay class (default: the episodic dual replay, §IV-B) and the noise given by name."""
    if replay_buffer_class is None:
        replay_buffer_class = EpisodicDualReplayBuffer
    if not isinstance(replay_buffer_class, type) or not issubclass(replay_buffer_class, ReplayBuffer):
        raise TypeError(f"Invalid replay_buffer_class={replay_buffer_class!r}: expected a ReplayBuffer subclass")
    if isinstance(action_noise, str) and action_noise != "random_walk":
        raise ValueError(f"Invalid action_noise={action_noise!r}: expected 'random_walk', an SB3 ActionNoise or None")
    return replay_buffer_class
