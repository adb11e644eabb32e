"""Checks of what the envs give the algorithms: the observation space at construction, each observation in training.

A NaN or an infinity in an observation does not stop training by itself: the networks turn it into NaN parameters
(the async Q family trains on silently) or fail later inside torch with a message about something else.
:func:`check_finite_observations` stops at the first one and names the env that returned it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["SB3_OBSERVATION_SPACES", "check_finite_observations", "check_observation_space"]

#: The observation spaces SB3's policies and buffers take (``stable_baselines3.common.preprocessing``).
SB3_OBSERVATION_SPACES: tuple[type[spaces.Space], ...] = (
    spaces.Box,
    spaces.Discrete,
    spaces.MultiDiscrete,
    spaces.MultiBinary,
    spaces.Dict,
)


def check_observation_space(algorithm: str, space: spaces.Space, supported: tuple[type[spaces.Space], ...]) -> None:
    """``ValueError`` naming ``algorithm``, the spaces it takes and ``space`` unless ``space`` is one of ``supported``
    (for a ``Dict`` space, each of its subspaces too, none of them a ``Dict``)."""
    inner = tuple(cls for cls in supported if cls is not spaces.Dict)
    subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else ()
    bad = space if not isinstance(space, supported) else next((sub for sub in subspaces if not isinstance(sub, inner)), None)
    if bad is None:
        return
    accepted = ", ".join(cls.__name__ for cls in supported)
    which = "" if bad is space else f" (its subspace {bad})"
    raise ValueError(
        f"Invalid env: {algorithm} supports {accepted} observation spaces, got {space}{which}: encode such "
        "observations as a Box (e.g. gymnasium.wrappers.FlattenObservation)"
    )


def check_finite_observations(obs: Any, envs: int | Sequence[int] | np.ndarray = 0) -> None:
    """``ValueError`` if a float observation of a batch holds a NaN or an infinity, naming its env and the observation.

    One ``np.isfinite`` over the batch; integer observations (images, discrete spaces) are not looked at.

    :param obs: a batch of observations, one row per env: an array, a list of each env's observation, or a ``dict``
        of such batches (``Dict`` spaces)
    :param envs: the index of the batch's first env (rows are consecutive envs), or the index of each row's env
    """
    if isinstance(obs, dict):
        for key, value in obs.items():
            _check_batch(value, envs, f" (key {key!r})")
        return
    _check_batch(obs, envs, "")


def _check_batch(obs: Any, envs: int | Sequence[int] | np.ndarray, where: str) -> None:
    if len(obs) == 0 or np.asarray(obs[0]).dtype.kind not in "fc":  # before np.asarray: a list is not copied for nothing
        return
    batch = np.asarray(obs)
    if np.isfinite(batch).all():
        return
    row = int(np.flatnonzero(~np.isfinite(batch.reshape(len(batch), -1)).all(axis=1))[0])
    env = envs + row if isinstance(envs, int) else int(envs[row])
    raise ValueError(
        f"Env {env} returned a non-finite observation{where} (NaN or inf): {batch[row]!r}. The networks cannot learn "
        "from it: fix the env, or replace such values in a wrapper (e.g. gymnasium.wrappers.TransformObservation)."
    )


def check_finite_rewards(
    rewards: Any, envs: int | Sequence[int] | np.ndarray = 0, step: int | Callable[[], int] | None = None
) -> None:
    """``ValueError`` if a reward of a batch is NaN or infinite, naming its env (and the global step, if given), before
    any update uses it.

    :param rewards: one reward per env
    :param envs: the index of the batch's first env (rows are consecutive envs), or the index of each row's env
    :param step: the global env step count when the batch was stepped, or a function giving it (called only on an
        error)
    """
    if math.isfinite(sum(rewards.tolist() if isinstance(rewards, np.ndarray) else rewards)):
        return  # the common case, ~0.1 us: a NaN or an infinity makes the sum non-finite
    batch = np.asarray(rewards, dtype=np.float64).reshape(-1)
    finite = np.isfinite(batch)
    if finite.all():
        return
    row = int(np.flatnonzero(~finite)[0])
    env = envs + row if isinstance(envs, int) else int(envs[row])
    when = "" if step is None else f" at global step {step() if callable(step) else step}"
    raise ValueError(
        f"Env {env} returned a non-finite reward (NaN or inf){when}: {float(batch[row])!r}. The networks cannot learn "
        "from it: fix the env, or replace such values in a wrapper (e.g. gymnasium.wrappers.TransformReward)."
    )
