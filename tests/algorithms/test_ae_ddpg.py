"""AE-DDPG: the paper's pure parts, asynchronous collection, the storing rule fed from many envs, the SB3 contract."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise, VectorizedActionNoise

from sb3_async import (
    AEDDPG,
    AsyncEnvPool,
    EpisodicDualReplayBuffer,
    PrioritizedReplayBuffer,
    RandomWalkActionNoise,
    WorkerError,
)
from sb3_async.ae_ddpg.arguments import rho_for_n_envs
from sb3_async.ae_ddpg.collector import EpisodeCaches
from sb3_async.common.dpg_update import clipped_double_q
from sb3_async.common.returns import bootstrapped_targets, weighted_squared_loss
from sb3_async.env_pool import EnvError

# The learner with one torch thread, as the benchmark runs it: on 2 cores its intra-op threads would otherwise spin on
# the env workers' core.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


SMALL_NET = dict(net_arch=dict(pi=[16], qf=[16]))
LOCAL = dict(n_hosts=0)  # envs stepped in this process: no process start-up for tests that need none


class TaggedEnv(gym.Env):
    """Observation ``[env_tag, t]``, constant reward ``reward``, episodes of ``length`` steps (truncated), an optional
    sleep per step and an optional error at step ``fail_at``."""

    observation_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, tag: float = 0.0, reward: float = -1.0, length: int = 5, sleep: float = 0.0, fail_at: int = 0):
        self.tag, self.reward, self.length, self.sleep, self.fail_at = tag, reward, length, sleep, fail_at
        self.t, self.steps = 0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.tag, self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.sleep:
            time.sleep(self.sleep)
        self.t += 1
        self.steps += 1
        if self.fail_at and self.steps == self.fail_at:
            raise RuntimeError(f"boom in env {self.tag}")
        return self._obs(), self.reward, False, self.t >= self.length, {}


def tagged(**kwargs: Any) -> Any:
    return lambda: TaggedEnv(**kwargs)


# ---------------------------------------------------------------- pure functions
def test_rho_grows_with_n_envs_over_the_papers_range() -> None:
    assert rho_for_n_envs(1) == pytest.approx(0.05)
    assert rho_for_n_envs(4) == pytest.approx(0.05 + 0.2 * 3 / 15)
    assert rho_for_n_envs(16) == pytest.approx(0.25)
    assert rho_for_n_envs(64) == pytest.approx(0.25)
    values = [rho_for_n_envs(n) for n in range(1, 17)]
    assert values == sorted(values)
    with pytest.raises(ValueError, match="n_envs"):
        rho_for_n_envs(0)


def test_the_critic_target_is_eq_3_by_hand() -> None:
    """``dpg_update``'s target (the one ``train()`` uses) is eq. 3, with no bootstrap past a terminal state."""
    rewards = th.tensor([[1.0], [-2.0], [0.5]])
    dones = th.tensor([[0.0], [1.0], [0.0]])
    next_q = th.tensor([[10.0], [10.0], [-4.0]])
    # y = r + gamma (1 - d) Q'(s', mu'(s')), gamma 0.9: 1 + 9 = 10; -2 (terminal); 0.5 - 3.6 = -3.1
    expected = th.tensor([[10.0], [-2.0], [-3.1]])
    assert th.allclose(bootstrapped_targets(rewards, dones, next_q, 0.9), expected)


def test_clipped_double_q_takes_the_smaller_target_critic_by_hand() -> None:
    q1, q2 = th.tensor([[1.0], [5.0], [-2.0]]), th.tensor([[3.0], [4.0], [-3.0]])
    assert th.equal(clipped_double_q([q1, q2]), th.tensor([[1.0], [4.0], [-3.0]]))  # TD3's eq. 10: min(Q1', Q2')
    assert clipped_double_q([q1]) is q1  # one critic: DDPG's target


def test_the_weighted_critic_loss_by_hand_and_unweighted_is_td3s_mse() -> None:
    """``dpg_update``'s critic loss with AE-DDPG's scale (1, eq. 2) and prioritized replay's weights."""
    q = th.tensor([[1.0], [2.0]])
    y = th.tensor([[3.0], [0.0]])
    w = th.tensor([[0.5], [1.0]])
    # (0.5 * 2^2 + 1 * 2^2) / 2 = 3
    assert weighted_squared_loss(y - q, w, scale=1.0).item() == pytest.approx(3.0)
    assert weighted_squared_loss(y - q, th.ones_like(w), scale=1.0).item() == pytest.approx(F.mse_loss(q, y).item())


def test_episode_caches_keep_each_envs_rows_in_order_and_forget_overwritten_ones() -> None:
    caches = EpisodeCaches(n_envs=2, capacity=4)
    for env_idx, row, reward in [(0, 0, 1.0), (1, 1, -1.0), (0, 2, 2.0), (1, 3, -2.0), (0, 0, 3.0)]:
        caches.record(env_idx, row, reward)
    rows, ret = caches.finish(1)
    assert rows.tolist() == [1, 3] and ret == -3.0
    rows, ret = caches.finish(0)  # its first row (write 0) was overwritten by write 4
    assert rows.tolist() == [2, 0] and ret == 6.0
    assert caches.finish(0)[0].size == 0  # emptied for the next episode


# ---------------------------------------------------------------- the storing rule fed from many envs
def test_storing_rule_fed_from_interleaved_envs_per_env_caches_shared_r_max() -> None:
    # env 0: return -1 x 3 = -3; env 1: -2 x 2 = -4; env 2: -0.5 x 5 = -2.5. All three step together, so episodes end
    # in the order env1 (t=2, -4, first: in), env0 (t=3, -3 >= -4: in), env1 (t=4, -4 < -3: out), env2 (t=5, -2.5: in),
    # env0 (t=6, -3: out), env1 (t=6, -4: out), env1 (t=8: out), env0 (t=9: out)
    pool = AsyncEnvPool(
        [tagged(tag=0, reward=-1.0, length=3), tagged(tag=1, reward=-2.0, length=2), tagged(tag=2, reward=-0.5, length=5)],
        n_workers=0,
    )
    model = AEDDPG("MlpPolicy", pool, learning_starts=10_000, buffer_size=1000, policy_kwargs=SMALL_NET, seed=0)
    model.learn(27)  # 9 steps of each env
    buffer = model.replay_buffer
    assert isinstance(buffer, EpisodicDualReplayBuffer) and not buffer.episode_caches
    assert buffer.pos == 27 and buffer.n_episodes == 3 + 4 + 1
    assert buffer.n_hmemory_episodes == 3 and buffer.r_max == pytest.approx(-2.5)
    h_obs = buffer.h_observations[: buffer.h_size, 0]
    assert h_obs[:, 0].tolist() == [1, 1, 0, 0, 0, 2, 2, 2, 2, 2]  # whole episodes, in admission order
    assert h_obs[:, 1].tolist() == [0, 1, 0, 1, 2, 0, 1, 2, 3, 4]  # each episode's steps in order
    assert buffer.h_rewards[: buffer.h_size, 0].tolist() == [-2, -2, -1, -1, -1] + [-0.5] * 5
    next_t = buffer.h_next_observations[: buffer.h_size, 0, 1]
    assert np.array_equal(next_t, h_obs[:, 1] + 1)  # the final observation, not the reset's, ends each episode
    assert buffer.h_timeouts[: buffer.h_size, 0].tolist() == [0, 1, 0, 0, 1, 0, 0, 0, 0, 1]
    assert model.env_transitions.tolist() == [9, 9, 9]
    model.env.close()


# ---------------------------------------------------------------- asynchronous collection
def test_a_slow_env_does_not_stall_the_others() -> None:
    factories = [tagged(tag=0, sleep=1.0, length=1000), tagged(tag=1, length=1000), tagged(tag=2, length=1000)]
    model = AEDDPG(
        "MlpPolicy", AsyncEnvPool(factories, n_hosts=3), learning_starts=0, gradient_steps=1, batch_size=8,
        policy_kwargs=SMALL_NET, seed=0,
    )  # fmt: skip
    start = time.perf_counter()
    model.learn(90)
    elapsed = time.perf_counter() - start
    slow, fast = model.env_transitions[0], model.env_transitions[1:]
    # Stepped in lockstep, the 90 transitions would take 30 slow steps, 30 s; here the slow env made a few.
    assert slow * 5 <= fast.min(), model.env_transitions
    assert elapsed < 15, elapsed
    model.env.close()


def test_gradient_steps_run_while_the_envs_step() -> None:
    # Envs that take 20 ms a step, a learner that takes longer than that per collection (each of its 20 gradient steps
    # samples for at least 2 ms, however fast the machine): the envs' steps finish during the gradient steps, so
    # receiving them costs far less than the 20 ms per receive a sequential loop would wait.
    step_seconds = 0.02
    factories = [tagged(tag=i, sleep=step_seconds, length=1000) for i in range(2)]
    model = AEDDPG(
        "MlpPolicy", AsyncEnvPool(factories, n_hosts=2), learning_starts=0, gradient_steps=20, batch_size=32, seed=0,
        train_freq=2, buffer_size=1000, policy_kwargs=SMALL_NET,
    )  # fmt: skip
    sample = model.replay_buffer.sample

    def slow_sample(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.002)
        return sample(*args, **kwargs)

    model.replay_buffer.sample = slow_sample  # type: ignore[method-assign]
    model.learn(24)
    stats = model.collection_stats
    assert stats["train_seconds"] > stats["receives"] * step_seconds  # the learner was the slower side
    assert stats["recv_seconds"] < 0.5 * stats["receives"] * step_seconds, stats
    fractions = model.overlap_stats()
    assert 0.0 <= fractions["time/recv_wait_fraction"] < fractions["time/train_fraction"] <= 1.0
    model.env.close()


@pytest.mark.parametrize("ratio", [1.0, 2.0, 0.75])
def test_updates_per_transition_buys_exactly_that_many_gradient_steps(ratio: float) -> None:
    # Receives of varying size (envs ready at different times) and a fractional ratio: the carried fraction keeps the
    # total at floor(transitions trained on x ratio), however the transitions were grouped.
    factories = [tagged(tag=i, sleep=0.002 * i, length=7) for i in range(3)]
    model = AEDDPG(
        "MlpPolicy", AsyncEnvPool(factories, n_hosts=3), learning_starts=10, batch_size=8, seed=0,
        buffer_size=1000, policy_kwargs=SMALL_NET, updates_per_transition=ratio,
    )  # fmt: skip
    passed: list[int] = []
    scale = model._scaled_gradient_steps

    def spy(gradient_steps: int) -> int:
        passed.append(gradient_steps)  # what SB3 asked for: the transitions of the collection
        return scale(gradient_steps)

    model._scaled_gradient_steps = spy  # type: ignore[method-assign]
    model.learn(100)
    assert model.num_timesteps - 10 <= sum(passed) <= model.num_timesteps
    assert model._n_updates == int(sum(passed) * ratio + 1e-9)
    model.env.close()


# ---------------------------------------------------------------- SB3 contract
def test_predict_is_the_actor_without_noise() -> None:
    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=2, pool_kwargs=LOCAL, policy_kwargs=SMALL_NET, seed=0)
    assert isinstance(model.action_noise, RandomWalkActionNoise) and model.action_noise.n_envs == 2
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    with th.no_grad():
        expected = model.policy.unscale_action(model.actor(th.as_tensor(obs)).numpy())
    for deterministic in (True, True, False):
        actions, _ = model.predict(obs, deterministic=deterministic)
        np.testing.assert_allclose(actions, expected, rtol=1e-6)
    model.env.close()


@pytest.mark.parametrize("n_critics", [1, 2])
@pytest.mark.parametrize("buffer_class", [ReplayBuffer, EpisodicDualReplayBuffer])
def test_train_is_sb3_td3s_update_with_ddpgs_settings(buffer_class: type, n_critics: int) -> None:
    """AEDDPG's own update loop gives the parameters SB3's TD3 ``train()`` gives with no policy delay and no target
    smoothing, on the same batches: DDPG's with one critic, TD3's clipped double Q with two."""
    from stable_baselines3.td3.td3 import TD3

    net = dict(SMALL_NET, n_critics=n_critics)
    kwargs = dict(n_envs=2, pool_kwargs=LOCAL, policy_kwargs=net, replay_buffer_class=buffer_class, tau=0.1)
    model = AEDDPG("MlpPolicy", "Pendulum-v1", learning_starts=50, batch_size=32, seed=3, **kwargs)
    model.learn(200)  # fills the replay and trains: Adam's moments are not zero
    reference = AEDDPG("MlpPolicy", "Pendulum-v1", seed=3, **kwargs)
    reference.set_parameters(model.get_parameters())  # networks and optimizer states
    reference.replay_buffer = model.replay_buffer
    reference._n_updates = model._n_updates
    reference._current_progress_remaining = model._current_progress_remaining
    reference.set_logger(model.logger)
    for target in (model, reference):
        target.actor.optimizer = th.optim.Adam(target.actor.parameters(), lr=1e-3)  # one Adam for both: the same rule
        target.critic.optimizer = th.optim.Adam(target.critic.parameters(), lr=1e-3)
        target.lr_schedule = lambda _: 1e-3
    np.random.seed(7)
    model.train(gradient_steps=5, batch_size=32)
    np.random.seed(7)
    TD3.train(reference, gradient_steps=5, batch_size=32)
    for ours, theirs in zip(model.policy.state_dict().values(), reference.policy.state_dict().values()):
        th.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert model._n_updates == reference._n_updates
    for target in (model, reference):
        target.env.close()


def test_adam_is_torchs_fused_one_unless_told_otherwise() -> None:
    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, pool_kwargs=LOCAL, policy_kwargs=SMALL_NET)
    assert model.actor.optimizer.defaults["fused"] and model.critic.optimizer.defaults["fused"]
    model.env.close()
    model = AEDDPG(
        "MlpPolicy", "Pendulum-v1", n_envs=1, pool_kwargs=LOCAL, policy_kwargs=dict(**SMALL_NET, optimizer_kwargs={})
    )
    assert not model.actor.optimizer.defaults["fused"]
    model.env.close()


def test_paper_defaults() -> None:
    model = AEDDPG("MlpPolicy", "Pendulum-v1", pool_kwargs=LOCAL)
    assert model.n_envs == 16 and model.batch_size == 128 and model.tau == 1e-3 and model.gamma == 0.99
    assert model.learning_rate == 1e-4 and model.buffer_size == 1_000_000 and model.policy_delay == 1
    assert [m.out_features for m in model.actor.mu if isinstance(m, th.nn.Linear)] == [256, 256, 128, 1]
    assert [m.out_features for m in model.critic.qf0 if isinstance(m, th.nn.Linear)] == [256, 128, 1]
    assert len(model.critic.q_networks) == 1
    buffer = model.replay_buffer
    assert isinstance(buffer, EpisodicDualReplayBuffer) and buffer.hmemory_size == 50_000
    assert buffer.rho == pytest.approx(0.25) and buffer.n_envs == 1
    model.env.close()


def test_callbacks_once_per_n_envs_transitions_and_each_episode_once() -> None:
    class Count(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.calls, self.episodes, self.steps = 0, 0, []

        def _on_step(self) -> bool:
            self.calls += 1
            self.episodes += int(np.sum(self.locals["dones"]))
            self.steps.append(self.num_timesteps)
            assert len(self.locals["infos"]) == 3
            return True

    pool = AsyncEnvPool([tagged(tag=i, length=4) for i in range(3)], n_hosts=0)
    model = AEDDPG("MlpPolicy", pool, learning_starts=10, policy_kwargs=SMALL_NET, seed=0)
    callback = Count()
    model.learn(60, callback=callback, progress_bar=True)
    assert callback.calls == model.num_timesteps // 3 == 20
    assert callback.episodes == model._episode_num == 15
    assert len(model.ep_info_buffer) == 15 and model.ep_info_buffer[-1]["r"] == pytest.approx(-4.0)
    model.env.close()


def test_evaluations_during_learn_see_frozen_parameters() -> None:
    """Training runs in this process, between callbacks: an EvalCallback evaluates one set of parameters."""

    class ParamsSeen(gym.Wrapper):
        def step(self, action: Any) -> Any:
            with th.no_grad():
                seen.setdefault(model.num_timesteps, set()).add(float(sum(p.sum() for p in model.actor.parameters())))
            return self.env.step(action)

    seen: dict[int, set[float]] = {}
    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=2, pool_kwargs=LOCAL, learning_starts=140, policy_kwargs=SMALL_NET)
    eval_env = ParamsSeen(gym.make("Pendulum-v1", max_episode_steps=20))
    model.learn(200, callback=EvalCallback(eval_env, eval_freq=25, n_eval_episodes=2, warn=False))
    assert sorted(seen) == [50, 100, 150, 200]  # eval_freq counts calls, one per n_envs transitions
    assert all(len(values) == 1 for values in seen.values())  # one set of parameters per evaluation
    assert len(set.union(*seen.values())) == 3  # and training moved them between the last evaluations
    model.env.close()


def test_callback_stop_keeps_the_pool_and_learn_continues(tmp_path: Any) -> None:
    class StopAt(BaseCallback):
        def _on_step(self) -> bool:
            return self.num_timesteps < 40

    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=4, pool_kwargs=LOCAL, learning_starts=20, policy_kwargs=SMALL_NET)
    model.learn(1000, callback=StopAt())
    assert model.num_timesteps == 40 and not model.env.pool.closed
    model.learn(20, reset_num_timesteps=False)
    assert model.num_timesteps == 60
    model.env.close()


def test_save_load_with_the_dual_replay_round_trips(tmp_path: Any) -> None:
    model = AEDDPG(
        "MlpPolicy", "Pendulum-v1", n_envs=2, pool_kwargs=dict(n_hosts=0, env_kwargs=dict(max_episode_steps=50)),
        learning_starts=250, buffer_size=2000, replay_buffer_kwargs=dict(hmemory_size=500), policy_kwargs=SMALL_NET, seed=1,
    )  # fmt: skip
    model.learn(300)
    model.save(tmp_path / "model.zip")
    model.save_replay_buffer(tmp_path / "replay.pkl")
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    loaded = AEDDPG.load(tmp_path / "model.zip")
    loaded.load_replay_buffer(tmp_path / "replay.pkl")
    np.testing.assert_array_equal(loaded.predict(obs)[0], model.predict(obs)[0])
    for p, q in zip(model.policy.state_dict().values(), loaded.policy.state_dict().values()):
        assert th.equal(p, q)
    a, b = model.replay_buffer, loaded.replay_buffer
    assert isinstance(b, EpisodicDualReplayBuffer) and b.h_size == a.h_size > 0 and b.r_max == a.r_max
    assert b.n_episodes == a.n_episodes == 6 and not b.episode_caches and b.rho == a.rho
    for name in ("observations", "actions", "rewards", "h_observations", "h_next_observations", "h_rewards", "h_dones"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert loaded.n_envs == 2 and isinstance(loaded.action_noise, RandomWalkActionNoise)
    # learn() after load() rebuilds the saved env (the id and the pool options)
    loaded.learn(20, reset_num_timesteps=False)
    assert loaded.num_timesteps == 320 and loaded.env.num_envs == 2
    assert b.n_episodes == 6 and b.pos == 320
    # a buffer of a stock SB3 run with several env columns is refused, saying why
    from stable_baselines3.common.save_util import save_to_pkl

    save_to_pkl(tmp_path / "two.pkl", ReplayBuffer(10, loaded.observation_space, loaded.action_space, n_envs=2))
    with pytest.raises(ValueError, match="2 env columns"):
        loaded.load_replay_buffer(tmp_path / "two.pkl")
    assert loaded.replay_buffer is b  # kept
    mean, _ = evaluate_policy(loaded, gym.make("Pendulum-v1", max_episode_steps=10), n_eval_episodes=1)
    assert np.isfinite(mean)
    model.env.close()
    loaded.env.close()


# ---------------------------------------------------------------- ablations as arguments
@pytest.mark.parametrize("buffer_class", [ReplayBuffer, PrioritizedReplayBuffer])
def test_replay_ablations(buffer_class: type) -> None:
    model = AEDDPG(
        "MlpPolicy", "Pendulum-v1", n_envs=2, pool_kwargs=LOCAL, learning_starts=40, batch_size=16, buffer_size=500,
        replay_buffer_class=buffer_class, policy_kwargs=SMALL_NET, seed=0,
    )  # fmt: skip
    model.learn(100)
    buffer = model.replay_buffer
    assert type(buffer) is buffer_class and buffer.n_envs == 1 and buffer.pos == 100
    if buffer_class is PrioritizedReplayBuffer:
        # New transitions enter with the running maximum; the IS-weighted updates wrote |delta| back to the sampled ones.
        assert len(np.unique(buffer.tree.leaves(np.arange(100)))) > 10
        assert model.per_beta() > buffer.beta  # annealed towards 1
    model.env.close()


@pytest.mark.parametrize("noise_class", [NormalActionNoise, OrnsteinUhlenbeckActionNoise, RandomWalkActionNoise])
def test_noise_ablations_one_stream_per_env(noise_class: type) -> None:
    noise = noise_class(np.zeros(1), 0.3 * np.ones(1))
    model = AEDDPG(
        "MlpPolicy",
        "Pendulum-v1",
        n_envs=3,
        pool_kwargs=LOCAL,
        learning_starts=20,
        action_noise=noise,
        policy_kwargs=SMALL_NET,
    )
    model.learn(30)
    assert isinstance(model.action_noise, VectorizedActionNoise)
    streams = model.action_noise.n_envs if noise_class is RandomWalkActionNoise else len(model.action_noise.noises)
    assert streams == 3
    model.env.close()


def test_random_walk_streams_advance_only_for_their_envs_steps() -> None:
    noise = RandomWalkActionNoise(np.zeros(1), sigma=0.1, n_envs=3, generator=np.random.default_rng(0))
    first = noise.sample([2])
    assert noise.walk[0, 0] == noise.walk[1, 0] == 0.0 and noise.walk[2, 0] == pytest.approx(first[0, 0]) != 0.0
    noise.sample([0, 2])
    assert noise.walk[1, 0] == 0.0 and noise.walk[0, 0] != 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_envs=0), "n_envs"),
        (dict(gamma=2), "gamma"),
        (dict(tau=1.5), "tau"),
        (dict(buffer_size=0), "buffer_size"),
        (dict(buffer_size=100, batch_size=101), "batch_size=101: larger than buffer_size=100"),
        (dict(learning_starts=-1), "learning_starts"),
        (dict(min_ready=0), "min_ready"),
        (dict(action_noise="pink"), "action_noise"),
        (dict(replay_buffer_kwargs=dict(n_steps=3)), "n_steps"),
        (dict(updates_per_transition=0), "updates_per_transition"),
        (dict(updates_per_transition=float("nan")), "updates_per_transition"),
        (dict(updates_per_transition=2, gradient_steps=4), "gradient_steps=-1"),
        (
            dict(pool_kwargs=dict(n_hosts=0), n_envs=2, action_noise=RandomWalkActionNoise(np.zeros(1), n_envs=3)),
            "3 streams",
        ),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        AEDDPG("MlpPolicy", "Pendulum-v1", **{"pool_kwargs": LOCAL, **kwargs})


def test_a_vec_env_wrapper_is_refused_with_what_to_pass() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = VecNormalize(make_vec_env("Pendulum-v1", n_envs=2))
    with pytest.raises(ValueError, match="AsyncEnvPool"):
        AEDDPG("MlpPolicy", venv)


# ---------------------------------------------------------------- reliability
def test_an_env_error_names_the_env_with_its_traceback_and_closes_the_pool() -> None:
    factories = [tagged(tag=0, length=50), tagged(tag=1, length=50, fail_at=7)]
    pool = AsyncEnvPool(factories, n_hosts=2)
    pids = pool.host_pids()
    model = AEDDPG("MlpPolicy", pool, learning_starts=5, policy_kwargs=SMALL_NET)
    with pytest.raises(EnvError, match="Env 1") as error:
        model.learn(200)
    assert "boom in env 1" in str(error.value) and "Traceback" in str(error.value)
    assert pool.closed and model.env is None
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)  # the pool's own workers are gone


def test_a_dead_env_process_is_reported() -> None:
    pool = AsyncEnvPool([tagged(tag=0, length=50, sleep=0.01), tagged(tag=1, length=50, sleep=0.01)], n_hosts=2)
    pids = pool.host_pids()

    class Kill(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 20:
                os.kill(pool.host_pids()[1], signal.SIGKILL)
            return True

    model = AEDDPG("MlpPolicy", pool, learning_starts=5, policy_kwargs=SMALL_NET)
    with pytest.raises(WorkerError, match="env host of env 1"):
        model.learn(400, callback=Kill())
    assert pool.closed and not any(os.path.exists(f"/proc/{pid}") for pid in pids)


# ---------------------------------------------------------------- learning
def test_learns_pendulum_to_minus_200() -> None:
    """The zoo config's values (zoo_configs/ae_ddpg.yml); took 4000-6000 env steps (4-7 s on a quiet machine) in the
    benchmark, every seed of every run reaching -200: the model learn() returned last is the one evaluated >= -200."""
    model = AEDDPG(
        "MlpPolicy", "Pendulum-v1", n_envs=4, gamma=0.98, learning_rate=1e-3, tau=0.005, learning_starts=1000,
        buffer_size=200_000, policy_kwargs=dict(net_arch=dict(pi=[128, 128], qf=[128, 128])), seed=0,
    )  # fmt: skip
    eval_env = gym.make("Pendulum-v1")
    best = -np.inf
    while model.num_timesteps < 30_000 and best < -200:
        model.learn(2000, reset_num_timesteps=model.num_timesteps == 0)
        best = max(best, evaluate_policy(model, eval_env, n_eval_episodes=10)[0])
    model.env.close()
    assert best >= -200, best


# ---------------------------------------------------------------- RL Zoo
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "LunarLanderContinuous-v3", "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"])
def test_zoo_entry_builds_its_model(env_id: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import yaml
    from rl_zoo3.exp_manager import ExperimentManager

    from sb3_async import zoo

    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    zoo.register()
    entry = zoo.zoo_algorithm("ae_ddpg")
    assert entry is not None
    config = yaml.safe_load(entry.config_path.read_text())[env_id]
    manager = ExperimentManager(
        argparse.Namespace(), "ae_ddpg", env_id, str(tmp_path), n_timesteps=0, eval_freq=-1, seed=0,
        config=str(entry.config_path), hyperparams=dict(n_envs=2, pool_kwargs=dict(n_hosts=1)),
    )  # fmt: skip
    try:
        result = manager.setup_experiment()
    except gym.error.DependencyNotInstalled as error:
        pytest.skip(f"{env_id} needs an optional dependency: {error}")
    assert result is not None
    model = result[0]
    try:
        assert type(model) is AEDDPG and model.n_envs == 2 and model.env.num_envs == 2
        for name in ("gamma", "tau", "learning_starts", "buffer_size"):
            if name in config:
                assert getattr(model, name) == pytest.approx(config[name]), name
        assert model.lr_schedule(1.0) == pytest.approx(config.get("learning_rate", 1e-4))
        assert isinstance(model.action_noise, RandomWalkActionNoise)
        # the pool's envs are copies of the zoo's (Monitor-wrapped, without its file): they step and report episodes
        obs = model.env.reset()
        assert obs.shape == (2, *model.observation_space.shape)
    finally:
        model.env.close()


def test_ctrl_c_during_learn_leaves_no_env_process() -> None:
    class Interrupt(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 10:
                raise KeyboardInterrupt
            return True

    pool = AsyncEnvPool([tagged(tag=0, length=50), tagged(tag=1, length=50)], n_hosts=1)
    pids = pool.host_pids()
    model = AEDDPG("MlpPolicy", pool, learning_starts=100, policy_kwargs=SMALL_NET)
    with pytest.raises(KeyboardInterrupt):
        model.learn(100, callback=Interrupt())
    assert pool.closed and model.env is None
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids)


def test_dict_observations_are_refused_saying_what_to_do() -> None:
    class DictEnv(TaggedEnv):
        observation_space = spaces.Dict({"x": spaces.Box(-1.0, 1.0, (2,), np.float32)})

    with pytest.raises(ValueError, match="FlattenObservation"):
        AEDDPG("MlpPolicy", lambda: DictEnv(), n_envs=1, pool_kwargs=LOCAL)
