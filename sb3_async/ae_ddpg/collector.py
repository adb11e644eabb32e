"""AE-DDPG's collection (§IV-A): the envs stepped asynchronously in an :class:`~sb3_async.env_pool.AsyncEnvPool`,
acted on in one batched forward pass whenever some are ready, their transitions stored as they arrive.

Algorithm 1's per-env cache buffers ``B_i`` (:class:`EpisodeCaches`) are kept here, since the envs' transitions
arrive interleaved in the one Memory. :class:`PoolCollection` is the collecting half of
:class:`~sb3_async.ae_ddpg.AEDDPG` (a base class placed before SB3's ``TD3``): its state lives on the model, so the
saved model is what it always was.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np
from stable_baselines3.common.buffers import ReplayBuffer
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
from sb3_async.env_pool.vec_env import PoolVecEnv
from sb3_async.runtime.processes import StepTimeout


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


class PoolCollection(OffPolicyAlgorithm):
    """SB3's ``collect_rollouts`` for envs in an :class:`~sb3_async.env_pool.AsyncEnvPool`: each collection receives
    the envs whose step is done (``recv(min_ready)``, oldest first), stores their transitions, acts on all of them in
    one batched forward pass and sends their actions, so that they step while the learner trains. A slow env never
    holds the others back. Callbacks are called once per ``n_envs`` transitions (SB3's rhythm). The arguments of
    the pools built for it are here too.
    """

    min_ready: int  # envs to wait for at each receive
    pool_kwargs: dict[str, Any]  # for the pools built here
    backend: str
    backend_kwargs: dict[str, Any]
    _buffer_actions: np.ndarray  # the scaled actions of the steps in flight, per env
    _caches: EpisodeCaches
    _in_flight: dict[int, float]  # envs whose step was sent and not received yet -> when it was sent
    step_timeout: float | None  # seconds an env's step may stay in flight
    _episode_stats: np.ndarray  # return, length of each env's running episode
    _pending: dict[str, Any]

    def _resolve_noise(self) -> None:
        """Build the default noise (one random walk per env), give a one-stream random walk one stream per env and
        check a vectorised one's stream count."""
        if isinstance(self.action_noise, str):
            dim = int(np.prod(self.action_space.shape))  # type: ignore[arg-type]
            self.action_noise = RandomWalkActionNoise(np.zeros(dim), n_envs=self.n_envs)
        elif isinstance(self.action_noise, RandomWalkActionNoise) and not isinstance(self.action_noise, VectorizedActionNoise):
            self.action_noise = self.action_noise.for_envs(self.n_envs)
        if isinstance(self.action_noise, RandomWalkActionNoise) and self.action_noise.n_envs != self.n_envs:
            raise ValueError(
                f"Invalid action_noise={self.action_noise!r}: it has {self.action_noise.n_envs} streams for {self.n_envs} envs"
            )

    def _reset_collection_stats(self) -> None:
        self.collection_stats = dict(
            recv_seconds=0.0, train_seconds=0.0, receives=0, transitions=0, started=time.perf_counter()
        )
        self.env_transitions = np.zeros(self.n_envs, dtype=np.int64)

    def _empty_pending(self) -> dict[str, Any]:
        """What the next callback call sees: the transitions since the last one, per env index."""
        return dict(dones=np.zeros(self.n_envs, dtype=bool), infos=[{} for _ in range(self.n_envs)], count=0)

    def _noise(self, ids: list[int]) -> np.ndarray | None:
        """One noise sample per env in ``ids``, advancing only their streams."""
        noise = self.action_noise
        if noise is None:
            return None
        if isinstance(noise, RandomWalkActionNoise):
            return noise.sample(ids)
        if isinstance(noise, VectorizedActionNoise):
            return np.stack([noise.noises[i]() for i in ids])
        return np.stack([noise() for _ in ids])  # one env

    def _act_and_send(self, ids: list[int], learning_starts: int) -> None:
        """SB3's ``_sample_action`` for the envs in ``ids`` (one batched forward pass), then ``send``."""
        assert self._last_obs is not None
        obs = self._last_obs[ids]  # type: ignore[index]
        if self.num_timesteps < learning_starts:
            unscaled = np.array([self.action_space.sample() for _ in ids])
        else:
            unscaled, _ = self.predict(obs, deterministic=False)
        scaled = self.policy.scale_action(unscaled)
        noise = self._noise(ids)
        if noise is not None:
            scaled = np.clip(scaled + noise, -1, 1)
        self._buffer_actions[ids] = scaled
        actions = self.policy.unscale_action(scaled)
        self._pool_env().pool.send({i: actions[k] for k, i in enumerate(ids)})
        self._in_flight.update(dict.fromkeys(ids, time.monotonic()))

    def _receive(self, pool: Any) -> Any:
        """``pool.recv(min_ready)``, failing with :class:`StepTimeout` once an env's step, sent more than
        ``step_timeout`` seconds ago, has still not finished (all envs stuck, or one stuck while the others go on)."""
        min_ready = min(self.min_ready, len(self._in_flight))
        if self.step_timeout is None:
            return pool.recv(min_ready=min_ready)
        oldest = min(self._in_flight, key=self._in_flight.__getitem__)
        left = self._in_flight[oldest] + self.step_timeout - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                return pool.recv(min_ready=min_ready, timeout=left)
        with contextlib.suppress(TimeoutError):  # past its time: every result ready now, the oldest's among them?
            result = pool.recv(min_ready=1, timeout=0.0)
            if oldest in result[0]:
                return result
            self._in_flight = {i: sent for i, sent in self._in_flight.items() if i not in result[0]}
        stuck = time.monotonic() - self._in_flight[oldest]
        raise StepTimeout(
            f"Env {oldest} of the AsyncEnvPool has been stuck in a step for {stuck:.0f} s (step_timeout="
            f"{self.step_timeout:g} s)"
        )

    def _store_transition_of(
        self, i: int, next_obs: np.ndarray, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]
    ) -> None:
        """Algorithm 1, line 7: env ``i``'s transition to Memory and to its cache ``B_i``; lines 9-14 when its episode
        ended. Time-limit truncations are stored as SB3 stores them (not terminal for the critic's target)."""
        assert self.replay_buffer is not None and self._last_obs is not None
        done = terminated or truncated
        step_info = dict(info[FINAL_INFO]) if done else dict(info)
        step_info["TimeLimit.truncated"] = truncated and not terminated
        real_next = info[FINAL_OBS] if done else next_obs
        row = self.replay_buffer.pos
        self.replay_buffer.add(
            self._last_obs[i][None],  # type: ignore[index]
            np.asarray(real_next)[None],
            self._buffer_actions[i][None],
            np.array([reward], dtype=np.float32),
            np.array([done]),
            [step_info],
        )
        self._caches.record(i, row, reward)
        self._episode_stats[i] += (reward, 1)
        if done:
            rows, episodic_return = self._caches.finish(i)
            if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
                self.replay_buffer.store_episode(rows, 0, episodic_return)
            episode = step_info.get("episode")  # a Monitor-wrapped env reports its own
            if episode is None:
                episode = {"r": self._episode_stats[i, 0], "l": int(self._episode_stats[i, 1]), "t": time.time()}
            self.ep_info_buffer.append(episode)  # type: ignore[union-attr]
            if "is_success" in step_info:
                self.ep_success_buffer.append(step_info["is_success"])  # type: ignore[union-attr]
            self._episode_stats[i] = 0.0
            step_info["terminal_observation"] = real_next  # SB3 VecEnv's key, for callbacks
        pending = self._pending
        if done or not pending["dones"][i]:  # an episode end shown to the callbacks is kept until their next call
            pending["infos"][i] = step_info
        pending["dones"][i] |= done
        self._last_obs[i] = next_obs  # type: ignore[index]

    def _callbacks(self, callback: BaseCallback, rewards: dict[int, float]) -> bool:
        """One ``on_step()`` per ``n_envs`` transitions collected (SB3's rhythm), with the transitions since the last
        call: ``dones``/``infos`` of length ``n_envs``, each finished episode at its env's index."""
        pending = self._pending
        pending["count"] += len(rewards)
        if pending["count"] < self.n_envs:
            return True
        step_rewards = np.zeros(self.n_envs, dtype=np.float32)
        step_rewards[list(rewards)] = list(rewards.values())
        callback.update_locals(
            dict(
                self=self,
                env=self.env,
                new_obs=self._last_obs,
                rewards=step_rewards,
                dones=pending["dones"],
                infos=pending["infos"],
                actions=self._buffer_actions,
            )
        )
        count = pending["count"] - self.n_envs
        self._pending = self._empty_pending()
        self._pending["count"] = count
        return bool(callback.on_step())

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """Receive the envs that are ready, store their transitions, act on them and send (they step while the learner
        trains), until ``train_freq`` transitions (or episodes) were collected."""
        pool = self._pool_env().pool
        self.policy.set_training_mode(False)
        if not hasattr(self, "_buffer_actions") or len(self._buffer_actions) != self.n_envs:
            shape = self.action_space.shape or ()
            self._buffer_actions = np.zeros((self.n_envs, *shape), dtype=np.float32)
        if not self._in_flight:  # first collection after a reset: act on every env
            self._act_and_send(list(range(self.n_envs)), learning_starts)
        n_transitions, n_episodes = 0, 0
        stats = self.collection_stats
        callback.on_rollout_start()
        while should_collect_more_steps(train_freq, n_transitions, n_episodes):
            start = time.perf_counter()
            new_obs, rewards, terminations, truncations, infos = self._receive(pool)
            if isinstance(env, VecTransposeImage):  # the pool's envs are channel-last, the policy's space channel-first
                new_obs, infos = _transposed(env, new_obs, infos)
            stats["recv_seconds"] += time.perf_counter() - start
            ids = list(new_obs)
            for i in ids:
                del self._in_flight[i]
            ended = [i for i in ids if terminations[i] or truncations[i]]
            check_finite_observations([new_obs[i] for i in ids], ids)
            check_finite_observations([infos[i][FINAL_OBS] for i in ended], ended)
            check_finite_rewards([rewards[i] for i in ids], ids, self.num_timesteps)
            for i in ids:
                self._store_transition_of(i, new_obs[i], rewards[i], terminations[i], truncations[i], infos[i])
            self.num_timesteps += len(ids)
            n_transitions += len(ids)
            n_episodes += len(ended)
            stats["receives"] += 1
            stats["transitions"] += len(ids)
            self.env_transitions[ids] += 1
            if self.action_noise is not None and ended:  # the noise restarts with each episode (eq. 10: y_0 = 0)
                vectorized = isinstance(self.action_noise, VectorizedActionNoise)
                self.action_noise.reset(**(dict(indices=ended) if vectorized else {}))
            # Act on the ready envs at once, so that they step during the callbacks and the gradient steps.
            self._act_and_send(ids, learning_starts)
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            if not self._callbacks(callback, rewards):
                show_final_timesteps(callback, self.num_timesteps)
                return RolloutReturn(n_transitions, n_episodes, continue_training=False)
            for _ in ended:
                self._episode_num += 1
                if log_interval is not None and self._episode_num % log_interval == 0:
                    self.dump_logs()
        callback.on_rollout_end()
        # Callbacks are called once per n_envs transitions: the transitions since the last call count too.
        show_final_timesteps(callback, self.num_timesteps)
        return RolloutReturn(n_transitions, n_episodes, continue_training=True)

    def _pool_arguments(self) -> dict[str, Any]:
        """The :class:`AsyncEnvPool` arguments of the pools built here: ``pool_kwargs`` and the backend (a model saved
        before AEDDPG had a backend loads as ``"mp"``; ``"serial"``: a pool of ``n_hosts=0``)."""
        backend = getattr(self, "backend", "mp")
        if backend == "serial":  # every env stepped in this process: a pool without env host processes
            kwargs = {k: v for k, v in self.pool_kwargs.items() if k != "n_workers"}  # the deprecated name of n_hosts
            return dict(kwargs, n_hosts=0, backend="mp", backend_kwargs=None)
        return dict(self.pool_kwargs, backend=backend, backend_kwargs=getattr(self, "backend_kwargs", None) or None)

    def _pool_env(self) -> PoolVecEnv:
        """The :class:`PoolVecEnv` being trained on, under SB3's ``VecTransposeImage`` for image observations."""
        env = self.env.venv if isinstance(self.env, VecTransposeImage) else self.env
        if not isinstance(env, PoolVecEnv):
            raise RuntimeError(f"AEDDPG trains on an AsyncEnvPool's PoolVecEnv, got {self.env!r}")
        return env

    def _env_processes(self) -> int:
        """The env processes stepping on this machine (none for a pool of Ray actors or envs stepped in this process)."""
        if self.env is None:
            return 0
        pool = self._pool_env().pool
        return pool.n_hosts if pool.backend == "mp" else 0
