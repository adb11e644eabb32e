"""Episodic dual replay of AE-DDPG (Zhang et al., §IV-B): "Memory" + "HMemory", storing rule (Algorithm 1) and
sampling rule (Algorithm 2), as a drop-in SB3 ``ReplayBuffer``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import VecNormalize

from sb3_async.common.buffers.ages import SampleAges, ring_ages, sample_ages_of
from sb3_async.common.buffers.n_step import check_n_step_buffer, n_step_batch
from sb3_async.validation import check_float, check_int


def admits_episode(episodic_return: float, best_returns: np.ndarray, top_k: int) -> bool:
    """Algorithm 1, line 11: does an episode with return ``R_e`` enter HMemory?

    With ``top_k = 1`` this is the paper's ``R_e >= R_max`` (``R_max`` starts at -inf: at 0, tasks with negative
    returns would never qualify). With ``top_k = k`` the bar is the k-th best return so far (-inf until k episodes).

    :param episodic_return: ``R_e``, the sum of the episode's rewards (line 10)
    :param best_returns: the best returns so far, sorted in decreasing order, at most ``top_k`` of them
    :param top_k: which best return is the bar
    """
    bar = best_returns[top_k - 1] if len(best_returns) >= top_k else -np.inf
    return bool(episodic_return >= bar)


def update_best_returns(episodic_return: float, best_returns: np.ndarray, top_k: int) -> np.ndarray:
    """Algorithm 1, line 14 (``R_max <- max(R_e, R_max)``) generalised to the ``top_k`` best returns, decreasing."""
    return np.sort(np.append(best_returns, episodic_return))[::-1][:top_k].copy()


def _merge(from_h: np.ndarray, m_arr: np.ndarray, h_arr: np.ndarray) -> np.ndarray:
    """One batch array: rows where ``from_h`` from HMemory's ``h_arr``, the others from Memory's ``m_arr``."""
    out = np.empty((len(from_h), *m_arr.shape[1:]), dtype=np.result_type(m_arr, h_arr))
    out[~from_h] = m_arr
    out[from_h] = h_arr
    return out


class EpisodicDualReplayBuffer(ReplayBuffer):
    """
    Episodic dual replay of AE-DDPG (`Zhang et al. <https://arxiv.org/abs/1903.00827>`_, §IV-B, Algorithms 1 and 2).

    Storing rule (Algorithm 1): every transition goes to "Memory" (this ``ReplayBuffer``'s own storage); each env has
    its own episode cache (the paper's per-thread cache buffer: the env's column of Memory, tracked by its start and
    return, so nothing is copied twice); when an env's episode ends, the whole episode is copied to "HMemory" if its
    return ``R_e >= R_max``, then ``R_max <- max(R_max, R_e)``. ``R_max`` starts at -inf. Both memories are FIFO.

    Sampling rule (Algorithm 2): each transition of a batch comes from HMemory with probability ``rho``, else from
    Memory; all from Memory while HMemory is empty. ``n_steps > 1`` gives SB3 2.9's n-step returns (as
    ``NStepReplayBuffer``) from either memory; an n-step look-ahead never leaves an episode.

    Known failure mode: one lucky early episode sets ``R_max`` so high that HMemory stops receiving (docs/guide/replay.md).
    ``hmemory_top_k > 1`` (off by default) lowers the bar to the k-th best return so far.

    :param buffer_size: capacity of Memory (transitions, over all envs); the paper uses 1e6
    :param observation_space: observation space (``Dict`` spaces are refused)
    :param action_space: action space
    :param device: PyTorch device
    :param n_envs: number of parallel envs (the paper's interaction threads)
    :param optimize_memory_usage: SB3's memory-efficient Memory (next observation from the next slot)
    :param handle_timeout_termination: time-limit truncations are not terminal (SB3's meaning)
    :param hmemory_size: capacity of HMemory (transitions); default 5e4 from the paper (§V-B)
    :param rho: probability of sampling a transition from HMemory; default 0.15, the middle of the paper's range
        [0.05, 0.25] ("tuned according to the number of interaction threads", §V-B)
    :param n_steps: n of n-step returns (1: one-step transitions, ``discounts`` is None as in SB3's ``ReplayBuffer``)
    :param gamma: discount of the n-step returns (used only when ``n_steps > 1``)
    :param hmemory_top_k: an episode enters HMemory if its return is at least the k-th best so far; 1 (default) is
        the paper's ``R_max`` rule
    :param episode_caches: ``True`` (default): the buffer keeps each env's episode cache itself (each env's episode is
        contiguous in its column of Memory); ``False``: :meth:`add` only writes Memory and the caller keeps the caches
        and reports each finished episode with :meth:`store_episode` (AE-DDPG, whose envs' transitions arrive
        interleaved in one column)
    """

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: th.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
        handle_timeout_termination: bool = True,
        hmemory_size: int = 50_000,
        rho: float = 0.15,
        n_steps: int = 1,
        gamma: float = 0.99,
        hmemory_top_k: int = 1,
        episode_caches: bool = True,
    ) -> None:
        self.n_steps, self.gamma = check_n_step_buffer(
            type(self).__name__, observation_space, n_steps, gamma, optimize_memory_usage
        )
        self.hmemory_size = check_int("hmemory_size", hmemory_size)
        self.rho = check_float("rho", rho, 0.0, 1.0)
        self.hmemory_top_k = check_int("hmemory_top_k", hmemory_top_k)
        super().__init__(
            buffer_size,
            observation_space,
            action_space,
            device=device,
            n_envs=n_envs,
            optimize_memory_usage=optimize_memory_usage,
            handle_timeout_termination=handle_timeout_termination,
        )
        self.episode_caches = bool(episode_caches)
        # HMemory: one flat FIFO of whole episodes, stored as a single-env ring so n-step code applies unchanged.
        self.h_observations = np.zeros((self.hmemory_size, 1, *self.obs_shape), dtype=self.observations.dtype)
        self.h_next_observations = np.zeros_like(self.h_observations)
        self.h_actions = np.zeros((self.hmemory_size, 1, self.action_dim), dtype=self.actions.dtype)
        self.h_rewards = np.zeros((self.hmemory_size, 1), dtype=np.float32)
        self.h_dones = np.zeros((self.hmemory_size, 1), dtype=np.float32)
        self.h_timeouts = np.zeros((self.hmemory_size, 1), dtype=np.float32)
        self.h_pos = 0
        self.h_size = 0
        self.h_stamps = np.zeros(self.hmemory_size, dtype=np.int64)  # when each HMemory row's original was stored
        self.sample_ages = SampleAges(self.n_envs)
        # Per-env episode caches (Algorithm 1's B_i): length and return of the running episode.
        self.episode_lengths = np.zeros(self.n_envs, dtype=np.int64)
        self.episode_returns = np.zeros(self.n_envs, dtype=np.float64)
        self.best_returns = np.zeros(0, dtype=np.float64)
        self.n_episodes = 0
        self.n_hmemory_episodes = 0
        self.last_admission_episode = 0  # number (1-based) of the last episode admitted to HMemory; 0: none yet
        self.last_hmemory_fraction = 0.0

    @property
    def r_max(self) -> float:
        """``R_max``: the highest episodic return so far (-inf before the first episode end)."""
        return float(self.best_returns[0]) if len(self.best_returns) else -np.inf

    def add(
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        pos = self.pos
        super().add(obs, next_obs, action, reward, done, infos)  # Algorithm 1, line 7: copy to Memory
        sample_ages_of(self).stored(1)
        if not self.episode_caches:
            return
        self.episode_lengths += 1
        self.episode_returns += np.asarray(reward, dtype=np.float64).reshape(self.n_envs)
        for env_idx in np.flatnonzero(np.asarray(done).reshape(self.n_envs)):
            self._end_episode(int(env_idx), pos)

    def _end_episode(self, env_idx: int, last_pos: int) -> None:
        """Algorithm 1, lines 9-14, for the episode of env ``env_idx`` whose last transition is at ``last_pos``."""
        # An episode longer than Memory has lost its start.
        length = int(min(self.episode_lengths[env_idx], self.buffer_size))
        self.store_episode(
            (last_pos - length + 1 + np.arange(length)) % self.buffer_size, env_idx, self.episode_returns[env_idx]
        )
        self.episode_lengths[env_idx] = 0
        self.episode_returns[env_idx] = 0.0

    def store_episode(self, slots: np.ndarray, env_idx: int, episodic_return: float) -> bool:
        """Algorithm 1, lines 9-14, for one finished episode: copy it to HMemory if ``R_e >= R_max``, then update
        ``R_max``.

        :param slots: the Memory rows of the episode's transitions, in order (those still in Memory)
        :param env_idx: the Memory column they are in
        :param episodic_return: ``R_e``, the sum of the episode's rewards (line 10)
        :return: whether the episode entered HMemory
        """
        episodic_return = float(episodic_return)
        admitted = admits_episode(episodic_return, self.best_returns, self.hmemory_top_k)
        if admitted:
            src = np.asarray(slots, dtype=np.int64)[-self.hmemory_size :]  # one longer than HMemory keeps its end (FIFO)
            length = len(src)
            dst = (self.h_pos + np.arange(length)) % self.hmemory_size
            self.h_observations[dst, 0] = self.observations[src, env_idx]
            if self.optimize_memory_usage:
                self.h_next_observations[dst, 0] = self.observations[(src + 1) % self.buffer_size, env_idx]
            else:
                self.h_next_observations[dst, 0] = self.next_observations[src, env_idx]
            self.h_actions[dst, 0] = self.actions[src, env_idx]
            self.h_rewards[dst, 0] = self.rewards[src, env_idx]
            self.h_dones[dst, 0] = self.dones[src, env_idx]
            self.h_timeouts[dst, 0] = self.timeouts[src, env_idx]
            self._stamps()[dst] = sample_ages_of(self).stamp(ring_ages(src, self.pos, self.buffer_size))
            self.h_pos = (self.h_pos + length) % self.hmemory_size
            self.h_size = min(self.h_size + length, self.hmemory_size)
            self.n_hmemory_episodes += 1
            self.last_admission_episode = self.n_episodes + 1
        self.best_returns = update_best_returns(episodic_return, self.best_returns, self.hmemory_top_k)
        self.n_episodes += 1
        return admitted

    def sample(self, batch_size: int, env: VecNormalize | None = None) -> ReplayBufferSamples:
        """
        Algorithm 2: each transition from HMemory with probability ``rho`` (``m <= rho``, ``m ~ U(0, 1)``), else from
        Memory (uniformly within each, as SB3's ``ReplayBuffer``).

        :param batch_size: number of transitions
        :param env: SB3's VecNormalize, to normalize observations and rewards
        """
        if self.size() == 0:
            raise ValueError("Cannot sample from an empty EpisodicDualReplayBuffer")
        if self.h_size > 0 and self.rho > 0:
            from_h = np.random.random_sample(batch_size) <= self.rho
        else:  # no draw: with rho = 0 the batch is exactly what SB3's ReplayBuffer samples with the same seed
            from_h = np.zeros(batch_size, dtype=bool)
        n_h = int(from_h.sum())
        n_m = batch_size - n_h
        upper = self.buffer_size if self.full else self.pos
        if self.optimize_memory_usage and self.full:
            # The slot at pos holds a transition whose next observation was overwritten (SB3 excludes it too).
            m_inds = (np.random.randint(1, self.buffer_size, size=n_m) + self.pos) % self.buffer_size
        else:
            m_inds = np.random.randint(0, upper, size=n_m)
        m_envs = np.random.randint(0, self.n_envs, size=n_m)
        h_inds = np.random.randint(0, max(self.h_size, 1), size=n_h)
        ages = sample_ages_of(self)
        ages.add(np.concatenate([ring_ages(m_inds, self.pos, self.buffer_size), ages.since(self._stamps()[h_inds])]))
        m_part = self._gather(False, m_inds, m_envs, env)
        h_part = self._gather(True, h_inds, np.zeros(n_h, dtype=np.int64), env)
        self.last_hmemory_fraction = n_h / batch_size
        obs, actions, next_obs, dones, rewards = (_merge(from_h, m_arr, h_arr) for m_arr, h_arr in zip(m_part[:5], h_part[:5]))
        return ReplayBufferSamples(
            observations=self.to_torch(obs),
            actions=self.to_torch(actions),
            next_observations=self.to_torch(next_obs),
            dones=self.to_torch(dones),
            rewards=self.to_torch(rewards),
            discounts=None if self.n_steps == 1 else self.to_torch(_merge(from_h, m_part[5], h_part[5])),
        )

    def _stamps(self) -> np.ndarray:
        """``h_stamps`` (zeros for a replay pickled before it had them)."""
        if not hasattr(self, "h_stamps"):
            self.h_stamps = np.zeros(self.hmemory_size, dtype=np.int64)
        return self.h_stamps

    def _gather(
        self, hmemory: bool, inds: np.ndarray, env_inds: np.ndarray, env: VecNormalize | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Observations, actions, next observations, dones, rewards and n-step discounts (ones for 1-step) of one
        memory, HMemory or Memory."""
        next_observations: np.ndarray | None
        if hmemory:
            observations, actions, rewards = self.h_observations, self.h_actions, self.h_rewards
            dones, timeouts, pos, next_observations = self.h_dones, self.h_timeouts, self.h_pos, self.h_next_observations
        else:
            observations, actions, rewards = self.observations, self.actions, self.rewards
            dones, timeouts, pos = self.dones, self.timeouts, self.pos
            next_observations = None if self.optimize_memory_usage else self.next_observations

        def next_of(rows: np.ndarray) -> np.ndarray:
            if next_observations is None:  # optimize_memory_usage: the next observation is in the next slot
                return cast(np.ndarray, self._normalize_obs(observations[(rows + 1) % len(observations), env_inds], env))
            return cast(np.ndarray, self._normalize_obs(next_observations[rows, env_inds], env))

        obs = cast(np.ndarray, self._normalize_obs(observations[inds, env_inds], env))
        if self.n_steps > 1:
            batch = n_step_batch(
                rewards, dones, timeouts, pos, inds, env_inds, self.n_steps, self.gamma, self._reward_normalizer(env)
            )
            return obs, actions[inds, env_inds], next_of(batch.last_inds), batch.dones, batch.rewards, batch.discounts
        dones_out = (dones[inds, env_inds] * (1 - timeouts[inds, env_inds])).reshape(-1, 1)
        rewards_out = self._normalize_reward(rewards[inds, env_inds].reshape(-1, 1), env)
        return obs, actions[inds, env_inds], next_of(inds), dones_out, rewards_out, np.ones_like(rewards_out)

    def _reward_normalizer(self, env: VecNormalize | None) -> Callable[[np.ndarray], np.ndarray]:
        return lambda rewards: self._normalize_reward(rewards, env)

    def stats(self) -> dict[str, float]:
        """What ``ReplayStatsCallback`` logs: HMemory's size and episode count, ``R_max``, the last batch's share."""
        stats = {
            "replay/hmemory_size": float(self.h_size),
            "replay/hmemory_episodes": float(self.n_hmemory_episodes),
            "replay/hmemory_fraction": self.last_hmemory_fraction,
        }
        if np.isfinite(self.r_max):
            stats["replay/r_max"] = self.r_max
        return stats
