"""The async value-based family (one-step Q, one-step Sarsa, n-step Q) on the shared runtime."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.envs import FakeImageEnv, SimpleMultiObsEnv
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import configure

from sb3_async import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.common.exploration import epsilon_greedy, linear_epsilon
from sb3_async.common.gradient_sharing import GradientSharing
from sb3_async.common.policies import MnihCNN

FAMILY = [AsyncOneStepQ, AsyncSarsa, AsyncNStepQ]


@pytest.mark.parametrize("model_class", FAMILY)
def test_smoke_mlp(model_class):
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0).learn(3000)
    assert model.num_timesteps >= 3000
    assert isinstance(model.gradient_sharing, GradientSharing)  # the same runtime and optimizer machinery as A3C
    action, _ = model.predict(np.zeros(4, dtype=np.float32), deterministic=True)
    assert action.shape == () and 0 <= int(action) < 2


def test_smoke_cnn_uses_the_paper_network():
    env = lambda: FakeImageEnv(screen_height=84, screen_width=84, n_channels=4, discrete=True)  # noqa: E731
    model = AsyncNStepQ("CnnPolicy", env, n_workers=2, seed=0, backend="serial").learn(300)
    assert isinstance(model.policy.q_net.features_extractor, MnihCNN)
    # a single linear output unit per action on the 256 features (supp. §2)
    linear_layers = [m for m in model.policy.q_net.q_net.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear_layers] == [(256, env().action_space.n)]


def test_smoke_multi_input():
    AsyncSarsa("MultiInputPolicy", SimpleMultiObsEnv(random_start=False), n_workers=2, seed=0, backend="serial").learn(500)


def test_continuous_actions_are_rejected():
    with pytest.raises(ValueError, match="Discrete"):
        AsyncOneStepQ("MlpPolicy", "Pendulum-v1", n_workers=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(loss="l1"), ValueError, "loss"),
        (dict(target_update_interval=0), ValueError, "target_update_interval"),
        (dict(exploration_final_eps=(0.1, 2.0)), ValueError, "exploration_final_eps"),
        (dict(exploration_final_eps_probs=(0.5, 0.5)), ValueError, "exploration_final_eps_probs"),
        (dict(exploration_final_eps="0.1"), TypeError, "exploration_final_eps"),
        (dict(exploration_fraction=1.5), ValueError, "exploration_fraction"),
        (dict(optimizer="adam"), ValueError, "optimizer"),
        (dict(policy="PPOPolicy"), ValueError, "policy"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    policy = kwargs.pop("policy", "MlpPolicy")
    with pytest.raises(error, match=match):
        AsyncNStepQ(policy, "CartPole-v1", n_workers=1, **kwargs)


@pytest.mark.parametrize("model_class", FAMILY)
def test_logs_carry_the_exploration_rate(model_class):
    """``rollout/exploration_rate`` is logged as by SB3's DQN, the ε that ``predict(deterministic=False)`` uses."""
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=1, seed=0)
    model.set_logger(configure(None, []))
    model._log_extra()
    assert model.logger.name_to_value["rollout/exploration_rate"] == pytest.approx(model.exploration_rate) == 1.0


def test_target_network_refreshed_every_interval_only():
    frozen = AsyncOneStepQ("MlpPolicy", "CartPole-v1", n_workers=2, target_update_interval=10**9, seed=0, backend="serial")
    initial = [p.clone() for p in frozen.policy.q_net_target.parameters()]
    frozen.learn(2000)
    assert all(torch.equal(a, b) for a, b in zip(initial, frozen.policy.q_net_target.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(initial, frozen.policy.q_net.parameters()))

    refreshed = AsyncOneStepQ("MlpPolicy", "CartPole-v1", n_workers=2, target_update_interval=500, seed=0, backend="serial")
    initial = [p.clone() for p in refreshed.policy.q_net_target.parameters()]
    refreshed.learn(2000)
    assert any(not torch.equal(a, b) for a, b in zip(initial, refreshed.policy.q_net_target.parameters()))


def test_each_env_draws_its_final_epsilon_from_the_paper_distribution():
    model = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=8, seed=0)
    final = model._final_epsilons()
    assert final.shape == (2, 8) and set(final.flat) <= {0.1, 0.01, 0.5} and len(set(final.flat)) == 3
    assert model._final_epsilons() is final  # drawn once per model
    model.n_envs_per_worker = 4  # another layout: drawn again
    assert model._final_epsilons().shape == (2, 4)
    single = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=4, exploration_final_eps=0.05, seed=0)
    assert single._final_epsilons().tolist() == [[0.05]] * 4


def test_per_env_epsilons_anneal_and_explore_per_env():
    final = np.array([0.5, 0.01])
    assert linear_epsilon(1.0, 1.0, final, 0.1).tolist() == [1.0, 1.0]
    assert linear_epsilon(0.95, 1.0, final, 0.1) == pytest.approx([0.75, 0.505])  # half-way through the annealing
    assert linear_epsilon(0.5, 1.0, final, 0.1).tolist() == [0.5, 0.01]
    greedy = np.zeros(20_000, dtype=np.int64)
    eps = np.repeat([1.0, 0.0], 10_000)  # first half always explores (2 actions: half change), second never
    explored = epsilon_greedy(greedy, eps, 2, np.random.default_rng(0))
    assert np.mean(explored[:10_000] != 0) == pytest.approx(0.5, abs=0.03) and not explored[10_000:].any()


def test_predict_is_epsilon_greedy_like_dqn():
    model = AsyncOneStepQ("MlpPolicy", "CartPole-v1", n_workers=1, seed=0)
    obs = np.zeros((2000, 4), dtype=np.float32)
    greedy, _ = model.predict(obs, deterministic=True)
    assert len(set(greedy.tolist())) == 1
    assert model.exploration_rate == pytest.approx(1.0)  # before training: the initial ε
    explored, _ = model.predict(obs, deterministic=False)
    assert np.mean(explored == greedy) == pytest.approx(0.5, abs=0.05)  # ε = 1: uniform over 2 actions
    model._current_progress_remaining = 0.0
    assert model.exploration_rate == pytest.approx(0.1)  # the most probable final ε of the paper


class BestEval(BaseCallback):
    """Deterministic evaluation every ``every`` steps, workers paused; keeps the best mean."""

    def __init__(self, every: int):
        super().__init__()
        self.every, self.next, self.best = every, every, -np.inf
        self.env = gym.make("CartPole-v1")

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next:
            self.next += self.every
            with self.model.pause_workers():
                mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes=5)
            self.best = max(self.best, mean)
        return True


@pytest.mark.parametrize("model_class", FAMILY)
def test_learns_cartpole(model_class):
    """Each method improves on CartPole-v1 within 100k steps (zoo_configs settings): best deterministic evaluation
    >= 100, where a random policy scores ~22 and the untrained greedy one ~10 (the 475 / 300 goals are measured by the
    benchmark tool)."""
    model = model_class(
        "MlpPolicy",
        "CartPole-v1",
        n_workers=2,
        n_envs_per_worker=8,
        learning_rate=1e-3,
        target_update_interval=2000,
        seed=1,
    )
    callback = BestEval(20_000)
    start = time.perf_counter()
    model.learn(100_000, callback=callback)
    assert callback.best >= 100, f"best evaluation {callback.best} after {time.perf_counter() - start:.0f} s"


def test_n_step_q_learns_cartpole_with_one_update_per_env():
    """The same settings as 16 actor-learners of one env each, as in the paper (``separate_updates``)."""
    model = AsyncNStepQ(
        "MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=8, separate_updates=True, learning_rate=1e-3,
        target_update_interval=2000, seed=1,
    )  # fmt: skip
    callback = BestEval(20_000)
    start = time.perf_counter()
    model.learn(100_000, callback=callback)
    assert callback.best >= 100, f"best evaluation {callback.best} after {time.perf_counter() - start:.0f} s"
