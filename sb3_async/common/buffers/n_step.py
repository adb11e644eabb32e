"""n-step returns over a ring buffer of shape ``(buffer_size, n_envs)``, with SB3 2.9's ``NStepReplayBuffer`` semantics.

A pure function of the stored arrays, shared by the prioritized and the episodic buffers so that both return exactly
what SB3's ``NStepReplayBuffer`` returns for the same data (tested against it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from gymnasium import spaces

from sb3_async.validation import check_float


class NStepBatch(NamedTuple):
    """n-step quantities of a batch (NumPy): what SB3's ``NStepReplayBuffer`` puts in ``ReplayBufferSamples``."""

    rewards: np.ndarray  # (batch, 1): sum_k gamma^k r_{t+k} up to the first done/timeout (inclusive)
    discounts: np.ndarray  # (batch, 1): gamma^m, m = number of rewards summed
    dones: np.ndarray  # (batch, 1): done of the last transition used, 0 where it was a timeout
    last_inds: np.ndarray  # (batch,): buffer position whose next observation bootstraps the target


def check_n_steps(n_steps: object, optimize_memory_usage: bool) -> int:
    """``n_steps`` as an int >= 1, or a ``ValueError`` naming it; n-step returns need each step's own next observation,
    which ``optimize_memory_usage`` does not keep (as SB3's ``NStepReplayBuffer``)."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
        raise ValueError(f"Invalid n_steps={n_steps!r}: expected a positive integer")
    if n_steps > 1 and optimize_memory_usage:
        raise ValueError("n_steps > 1 with optimize_memory_usage=True is not supported (as SB3's NStepReplayBuffer)")
    return int(n_steps)


def check_n_step_buffer(
    buffer: str, observation_space: spaces.Space, n_steps: object, gamma: object, optimize_memory_usage: bool
) -> tuple[int, float]:
    """``(n_steps, gamma)`` checked for an n-step buffer (``buffer``, its class name, for the message): flat
    observations (a ``Dict`` space is refused), ``n_steps`` as :func:`check_n_steps`, ``gamma`` in [0, 1]."""
    if isinstance(observation_space, spaces.Dict):
        raise ValueError(
            f"{buffer} does not support Dict observation spaces (observation_space={observation_space}); flatten the "
            "observations (gymnasium.wrappers.FlattenObservation)"
        )
    return check_n_steps(n_steps, optimize_memory_usage), check_float("gamma", gamma, 0.0, 1.0)


def n_step_targets(
    rewards_seq: np.ndarray, dones_seq: np.ndarray, timeouts_seq: np.ndarray, gamma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step discounted return of each row, stopping at the first done or timeout (inclusive).

    ``G = sum_{k <= K} gamma^k r_k`` with ``K`` the first index where ``done or timeout`` (``n - 1`` if none);
    the bootstrap discount is ``gamma^(K + 1)``.

    :param rewards_seq: ``(batch, n)`` rewards r_t .. r_{t+n-1}
    :param dones_seq: ``(batch, n)`` done flags of the same transitions
    :param timeouts_seq: ``(batch, n)`` timeout (truncation) flags of the same transitions
    :param gamma: discount factor
    :return: ``(returns (batch, 1), discounts (batch, 1), K (batch,))``
    """
    n_steps = rewards_seq.shape[1]
    done_or_truncated = np.logical_or(dones_seq, timeouts_seq)
    has_end = done_or_truncated.any(axis=1)
    last = np.where(has_end, done_or_truncated.argmax(axis=1), n_steps - 1)
    mask = np.arange(n_steps).reshape(1, -1) <= last[:, None]
    # float32 powers and products as in SB3's NStepReplayBuffer, so that results are identical
    discounts = gamma ** mask.sum(axis=1, keepdims=True).astype(np.float32)
    powers = gamma ** np.arange(n_steps, dtype=np.float32).reshape(1, -1)
    returns = (rewards_seq * powers * mask).sum(axis=1, keepdims=True)
    return returns, discounts, last


def n_step_batch(
    rewards: np.ndarray,
    dones: np.ndarray,
    timeouts: np.ndarray,
    pos: int,
    batch_inds: np.ndarray,
    env_inds: np.ndarray,
    n_steps: int,
    gamma: float,
    normalize_reward: Callable[[np.ndarray], np.ndarray] | None = None,
) -> NStepBatch:
    """n-step rewards, discounts and dones of the transitions ``(batch_inds, env_inds)`` of a ring buffer.

    As SB3's ``NStepReplayBuffer``: the newest row (``pos - 1``) counts as truncated while it is not done, so a
    look-ahead never runs into the oldest data at ``pos``.

    :param rewards: ``(buffer_size, n_envs)`` stored rewards
    :param dones: ``(buffer_size, n_envs)`` stored done flags
    :param timeouts: ``(buffer_size, n_envs)`` stored timeout flags
    :param pos: the buffer's next write position
    :param batch_inds: buffer positions of the batch
    :param env_inds: env columns of the batch
    :param n_steps: look-ahead length n
    :param gamma: discount factor
    :param normalize_reward: applied to the reward sequences (SB3's VecNormalize hook), or None
    """
    buffer_size = rewards.shape[0]
    last_valid = (pos - 1) % buffer_size
    indices = (batch_inds[:, None] + np.arange(n_steps).reshape(1, -1)) % buffer_size
    env_col = env_inds[:, None]
    rewards_seq = rewards[indices, env_col]
    if normalize_reward is not None:
        rewards_seq = normalize_reward(rewards_seq)
    dones_seq = dones[indices, env_col]
    newest_open = (indices == last_valid) & (dones_seq == 0)
    timeouts_seq = np.where(newest_open, 1.0, timeouts[indices, env_col]).astype(np.float32)
    returns, discounts, last = n_step_targets(rewards_seq, dones_seq, timeouts_seq, gamma)
    last_inds = (batch_inds + last) % buffer_size
    last_dones = dones[last_inds, env_inds][:, None].astype(np.float32)
    last_timeouts = timeouts_seq[np.arange(len(last)), last][:, None].astype(np.float32)
    return NStepBatch(returns, discounts, last_dones * (1.0 - last_timeouts), last_inds)
