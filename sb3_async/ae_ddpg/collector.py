"""AE-DDPG's collection (§IV-A): the envs stepped asynchronously in an :class:`~sb3_async.env_pool.AsyncEnvPool`,
acted on in one batched forward pass whenever some are ready, their transitions stored as they arrive.

Algorithm 1's per-env cache buffers ``B_i`` (:class:`EpisodeCaches`) are kept here, since the envs' transitions
arrive interleaved in the one Memory. :class:`PoolCollector` is the collection an
:class:`~sb3_async.ae_ddpg.AEDDPG` model holds: its ``collect_rollouts`` is one call to
:meth:`PoolCollector.collect`. The collector's state (the steps in flight, the caches, the running episodes) is
rebuilt by the model, never saved with it.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import RolloutReturn, TrainFreq
from stable_baselines3.common.utils import should_collect_more_steps
from stable_baselines3.common.vec_env import VecEnv, VecTransposeImage

from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.common.callbacks import show_final_timesteps
from sb3_async.common.noise import RandomWalkActionNoise
from sb3_async.common.observations import check_finite_observations, check_finite_rewards
from sb3_async.env_pool import FINAL_INFO, FINAL_OBS
from sb3_async.runtime.processes import StepTimeout

if TYPE_CHECKING:
    from sb3_async.env_pool import AsyncEnvPool


class EpisodeCaches:
    """Algorithm 1's per-env cache buffers ``B_i`` when every env writes into one Memory in arrival order: for each env,
    the Memory rows of its running episode and its return. A row is forgotten once ``capacity`` later writes have
    overwritten it (an episode longer than Memory loses its start, as in :class:`EpisodicDualReplayBuffer`).

    :param n_envs: number of envs
    :param capacity: Memory's capacity (transitions)
    """

    def __init__(self, n_envs: int, capacity: int):
        self.capacity = int(capacity)
        self.rows: list[list[tuple[int, int]]] = [[] for _ in range(n_envs)]  # (Memory row, write number) per env
        self.returns = np.zeros(n_envs, dtype=np.float64)
        self.writes = 0

    def record(self, env_idx: int, row: int, reward: float) -> None:
        """Line 7: env ``env_idx``'s transition was written to Memory's row ``row``."""
        self.rows[env_idx].append((int(row), self.writes))
        self.returns[env_idx] += float(reward)
        self.writes += 1

    def finish(self, env_idx: int) -> tuple[np.ndarray, float]:
        """Lines 9-10: the Memory rows still holding env ``env_idx``'s finished episode (in order) and its return
        ``R_e``; the cache is emptied for the next episode."""
        oldest = self.writes - self.capacity
        rows = np.array([row for row, write in self.rows[env_idx] if write >= oldest], dtype=np.int64)
        episodic_return = float(self.returns[env_idx])
        self.clear(env_idx)
        return rows, episodic_return

    def clear(self, env_idx: int | None = None) -> None:
        """Drop the running episode of one env (or of all: an env reset cuts them)."""
        for i in range(len(self.rows)) if env_idx is None else [env_idx]:
            self.rows[i] = []
            self.returns[i] = 0.0


def _transposed(
    env: VecTransposeImage, obs: dict[int, Any], infos: dict[int, dict[str, Any]]
) -> tuple[dict[int, Any], dict[int, dict[str, Any]]]:
    """The pool's observations (and final observations) as SB3's ``VecTransposeImage`` gives them: channel-first."""
    obs = {i: env.transpose_observations(value) for i, value in obs.items()}
    infos = {
        i: {**info, FINAL_OBS: env.transpose_observations(info[FINAL_OBS])} if FINAL_OBS in info else info
        for i, info in infos.items()
    }
    return obs, infos


def noise_for(noise: ActionNoise | None, ids: list[int]) -> np.ndarray | None:
    """One sample of ``noise`` per env in ``ids``, advancing only their streams."""
    if noise is None:
        return None
    if isinstance(noise, RandomWalkActionNoise):
        return noise.sample(ids)
    if isinstance(noise, VectorizedActionNoise):
        return np.stack([noise.noises[i]() for i in ids])
    return np.stack([noise() for _ in ids])  # one env


class PoolCollector:
    """SB3's ``collect_rollouts`` for the envs of an :class:`~sb3_async.env_pool.AsyncEnvPool`, held by an
    :class:`~sb3_async.ae_ddpg.AEDDPG` model: each collection receives the envs whose step is done
    (``recv(min_ready)``, oldest first), stores their transitions, acts on all of them in one batched forward pass and
    sends their actions, so that they step while the learner trains. A slow env never holds the others back.
    Callbacks are called once per ``n_envs`` transitions (SB3's rhythm).

    :param n_envs: number of envs in the pool
    :param replay_capacity: transitions the model's Memory holds (for the per-env caches)
    :param min_ready: envs to wait for at each receive
    :param step_timeout: seconds an env's step may stay in flight (None: no limit)
    """

    def __init__(self, n_envs: int, replay_capacity: int, min_ready: int, step_timeout: float | None):
        self.n_envs, self.min_ready, self.step_timeout = n_envs, min_ready, step_timeout
        #: Algorithm 1's per-env caches ``B_i``
        self.caches = EpisodeCaches(n_envs, replay_capacity)
        #: Envs whose step was sent and not received yet -> when it was sent; None: no step sent since the envs' reset
        self.in_flight: dict[int, float] | None = None
        #: Return and length of each env's running episode
        self.episode_stats = np.zeros((n_envs, 2), dtype=np.float64)
        #: The scaled actions of the steps in flight, per env (built at the first collection)
        self.buffer_actions: np.ndarray | None = None
        #: Seconds waiting for envs and training, receives and transitions since ``learn()`` started
        self.stats: dict[str, Any] = {}
        #: Transitions collected from each env since ``learn()`` started
        self.env_transitions = np.zeros(n_envs, dtype=np.int64)
        self.pending = self._empty_pending()
        self.reset_stats()

    def reset_stats(self) -> None:
        """Restart :attr:`stats` and :attr:`env_transitions` (at the start of ``learn()``) and the transitions the
        next callback call sees."""
        self.stats = dict(recv_seconds=0.0, train_seconds=0.0, receives=0, transitions=0, started=time.perf_counter())
        self.env_transitions = np.zeros(self.n_envs, dtype=np.int64)
        self.pending = self._empty_pending()

    def reset_episodes(self, replay_capacity: int) -> None:
        """The envs were reset: their running episodes are cut and no step is in flight."""
        self.in_flight = {}
        self.caches = EpisodeCaches(self.n_envs, replay_capacity)
        self.episode_stats = np.zeros((self.n_envs, 2), dtype=np.float64)

    def overlap_stats(self) -> dict[str, float]:
        """How collection and learning overlapped since ``learn()`` started: the shares of wall-clock time spent waiting
        for envs (``recv``) and training, and the mean number of envs per receive."""
        stats = self.stats
        elapsed = max(time.perf_counter() - stats["started"], 1e-9)
        return {
            "time/recv_wait_fraction": stats["recv_seconds"] / elapsed,
            "time/train_fraction": stats["train_seconds"] / elapsed,
            "rollout/envs_per_receive": stats["transitions"] / max(stats["receives"], 1),
        }

    def _empty_pending(self) -> dict[str, Any]:
        """What the next callback call sees: the transitions since the last one, per env index."""
        return dict(dones=np.zeros(self.n_envs, dtype=bool), infos=[{} for _ in range(self.n_envs)], count=0)

    def _act_and_send(self, model: OffPolicyAlgorithm, pool: AsyncEnvPool, ids: list[int], learning_starts: int) -> None:
        """SB3's ``_sample_action`` for the envs in ``ids`` (one batched forward pass), then ``send``."""
        assert model._last_obs is not None and self.buffer_actions is not None and self.in_flight is not None
        obs = model._last_obs[ids]  # type: ignore[index]
        if model.num_timesteps < learning_starts:
            unscaled = np.array([model.action_space.sample() for _ in ids])
        else:
            unscaled, _ = model.predict(obs, deterministic=False)
        scaled = model.policy.scale_action(unscaled)
        noise = noise_for(model.action_noise, ids)
        if noise is not None:
            scaled = np.clip(scaled + noise, -1, 1)
        self.buffer_actions[ids] = scaled
        actions = model.policy.unscale_action(scaled)
        pool.send({i: actions[k] for k, i in enumerate(ids)})
        self.in_flight.update(dict.fromkeys(ids, time.monotonic()))

    def _receive(self, pool: AsyncEnvPool) -> Any:
        """``pool.recv(min_ready)``, failing with :class:`StepTimeout` once an env's step, sent more than
        ``step_timeout`` seconds ago, has still not finished (all envs stuck, or one stuck while the others go on)."""
        assert self.in_flight is not None
        min_ready, step_timeout = min(self.min_ready, len(self.in_flight)), self.step_timeout
        if step_timeout is None:
            return pool.recv(min_ready=min_ready)
        oldest = min(self.in_flight, key=self.in_flight.__getitem__)
        left = self.in_flight[oldest] + step_timeout - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                return pool.recv(min_ready=min_ready, timeout=left)
        with contextlib.suppress(TimeoutError):  # past its time: every result ready now, the oldest's among them?
            result = pool.recv(min_ready=1, timeout=0.0)
            if oldest in result[0]:
                return result
            self.in_flight = {i: sent for i, sent in self.in_flight.items() if i not in result[0]}
        stuck = time.monotonic() - self.in_flight[oldest]
        raise StepTimeout(
            f"Env {oldest} of the AsyncEnvPool has been stuck in a step for {stuck:.0f} s (step_timeout={step_timeout:g} s)"
        )

    def _store_transition_of(
        self,
        model: OffPolicyAlgorithm,
        i: int,
        next_obs: np.ndarray,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> None:
        """Algorithm 1, line 7: env ``i``'s transition to Memory and to its cache ``B_i``; lines 9-14 when its episode
        ended. Time-limit truncations are stored as SB3 stores them (not terminal for the critic's target)."""
        assert model.replay_buffer is not None and model._last_obs is not None and self.buffer_actions is not None
        done = terminated or truncated
        step_info = dict(info[FINAL_INFO]) if done else dict(info)
        step_info["TimeLimit.truncated"] = truncated and not terminated
        real_next = info[FINAL_OBS] if done else next_obs
        row = model.replay_buffer.pos
        model.replay_buffer.add(
            model._last_obs[i][None],  # type: ignore[index]
            np.asarray(real_next)[None],
            self.buffer_actions[i][None],
            np.array([reward], dtype=np.float32),
            np.array([done]),
            [step_info],
        )
        self.caches.record(i, row, reward)
        self.episode_stats[i] += (reward, 1)
        if done:
            rows, episodic_return = self.caches.finish(i)
            if isinstance(model.replay_buffer, EpisodicDualReplayBuffer):
                model.replay_buffer.store_episode(rows, 0, episodic_return)
            episode = step_info.get("episode")  # a Monitor-wrapped env reports its own
            if episode is None:
                episode = {"r": self.episode_stats[i, 0], "l": int(self.episode_stats[i, 1]), "t": time.time()}
            model.ep_info_buffer.append(episode)  # type: ignore[union-attr]
            if "is_success" in step_info:
                model.ep_success_buffer.append(step_info["is_success"])  # type: ignore[union-attr]
            self.episode_stats[i] = 0.0
            step_info["terminal_observation"] = real_next  # SB3 VecEnv's key, for callbacks
        pending = self.pending
        if done or not pending["dones"][i]:  # an episode end shown to the callbacks is kept until their next call
            pending["infos"][i] = step_info
        pending["dones"][i] |= done
        model._last_obs[i] = next_obs  # type: ignore[index]

    def _callbacks(self, model: OffPolicyAlgorithm, callback: BaseCallback, rewards: dict[int, float]) -> bool:
        """One ``on_step()`` per ``n_envs`` transitions collected (SB3's rhythm), with the transitions since the last
        call: ``dones``/``infos`` of length ``n_envs``, each finished episode at its env's index."""
        pending = self.pending
        pending["count"] += len(rewards)
        if pending["count"] < self.n_envs:
            return True
        step_rewards = np.zeros(self.n_envs, dtype=np.float32)
        step_rewards[list(rewards)] = list(rewards.values())
        callback.update_locals(
            dict(
                self=model,
                env=model.env,
                new_obs=model._last_obs,
                rewards=step_rewards,
                dones=pending["dones"],
                infos=pending["infos"],
                actions=self.buffer_actions,
            )
        )
        count = pending["count"] - self.n_envs
        self.pending = self._empty_pending()
        self.pending["count"] = count
        return bool(callback.on_step())

    def collect(
        self,
        model: OffPolicyAlgorithm,
        pool: AsyncEnvPool,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """``model``'s ``collect_rollouts`` on ``pool`` (``env``: the model's env around it): receive the envs that are
        ready, store their transitions in ``model``'s replay, act on them and send (they step while the learner
        trains), until ``train_freq`` transitions (or episodes) were collected."""
        model.policy.set_training_mode(False)
        if self.buffer_actions is None:
            shape = model.action_space.shape or ()
            self.buffer_actions = np.zeros((self.n_envs, *shape), dtype=np.float32)
        if self.in_flight is None:
            self.in_flight = {}
        if not self.in_flight:  # first collection after a reset: act on every env
            self._act_and_send(model, pool, list(range(self.n_envs)), learning_starts)
        n_transitions, n_episodes = 0, 0
        stats = self.stats
        callback.on_rollout_start()
        while should_collect_more_steps(train_freq, n_transitions, n_episodes):
            start = time.perf_counter()
            new_obs, rewards, terminations, truncations, infos = self._receive(pool)
            if isinstance(env, VecTransposeImage):  # the pool's envs are channel-last, the policy's space channel-first
                new_obs, infos = _transposed(env, new_obs, infos)
            stats["recv_seconds"] += time.perf_counter() - start
            ids = list(new_obs)
            for i in ids:
                del self.in_flight[i]
            ended = [i for i in ids if terminations[i] or truncations[i]]
            check_finite_observations([new_obs[i] for i in ids], ids)
            check_finite_observations([infos[i][FINAL_OBS] for i in ended], ended)
            check_finite_rewards([rewards[i] for i in ids], ids, model.num_timesteps)
            for i in ids:
                self._store_transition_of(model, i, new_obs[i], rewards[i], terminations[i], truncations[i], infos[i])
            model.num_timesteps += len(ids)
            n_transitions += len(ids)
            n_episodes += len(ended)
            stats["receives"] += 1
            stats["transitions"] += len(ids)
            self.env_transitions[ids] += 1
            noise = model.action_noise
            if noise is not None and ended:  # the noise restarts with each episode (eq. 10: y_0 = 0)
                noise.reset(**(dict(indices=ended) if isinstance(noise, VectorizedActionNoise) else {}))
            # Act on the ready envs at once, so that they step during the callbacks and the gradient steps.
            self._act_and_send(model, pool, ids, learning_starts)
            model._update_current_progress_remaining(model.num_timesteps, model._total_timesteps)
            if not self._callbacks(model, callback, rewards):
                show_final_timesteps(callback, model.num_timesteps)
                return RolloutReturn(n_transitions, n_episodes, continue_training=False)
            for _ in ended:
                model._episode_num += 1
                if log_interval is not None and model._episode_num % log_interval == 0:
                    model.dump_logs()
        callback.on_rollout_end()
        # Callbacks are called once per n_envs transitions: the transitions since the last call count too.
        show_final_timesteps(callback, model.num_timesteps)
        return RolloutReturn(n_transitions, n_episodes, continue_training=True)
