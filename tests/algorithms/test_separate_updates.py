"""``separate_updates`` (A3C and the async Q family): each env of a worker is an actor-learner of its own, with its own
update from its own steps, at the θ' of the worker's shared forward passes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from sb3_contrib.common.wrappers import ActionMasker
from stable_baselines3.common.envs import FakeImageEnv
from torch.nn import functional as F

from sb3_async import A3C, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.a3c.recorded_activations import RecordedActivationsUpdate
from sb3_async.common.gradient_sharing import Segment
from sb3_async.common.policies import A3CCnnPolicy

N_STEPS, N_ENVS = 5, 3


def test_segment_select_keeps_the_envs_steps():
    rng = np.random.default_rng(0)
    steps = [rng.normal(size=(N_ENVS, 2)) for _ in range(N_STEPS)]
    dict_obs = {"a": rng.normal(size=(N_ENVS, 4)), "b": np.arange(N_ENVS)}
    segment = Segment(
        obs=steps,
        actions=[np.arange(N_ENVS) + 10 * t for t in range(N_STEPS)],
        rewards=[np.full(N_ENVS, float(t)) + np.arange(N_ENVS) for t in range(N_STEPS)],
        dones=[np.arange(N_ENVS) == t for t in range(N_STEPS)],
        next_obs=dict_obs,
        masks=[np.eye(N_ENVS, dtype=bool) for _ in range(N_STEPS)],
        next_masks=np.eye(N_ENVS, dtype=bool),
    )
    part = segment.select(np.array([2, 0]))
    assert len(part) == N_STEPS
    for t in range(N_STEPS):
        np.testing.assert_array_equal(part.obs[t], steps[t][[2, 0]])
        np.testing.assert_array_equal(part.actions[t], [10 * t + 2, 10 * t])
        np.testing.assert_array_equal(part.rewards[t], [t + 2.0, float(t)])
        np.testing.assert_array_equal(part.dones[t], [t == 2, t == 0])
        np.testing.assert_array_equal(part.masks[t], np.eye(N_ENVS, dtype=bool)[[2, 0]])
    np.testing.assert_array_equal(part.next_obs["a"], dict_obs["a"][[2, 0]])
    np.testing.assert_array_equal(part.next_obs["b"], [2, 0])
    np.testing.assert_array_equal(part.next_masks, np.eye(N_ENVS, dtype=bool)[[2, 0]])
    assert Segment(steps, [], [], [], steps[0]).select(np.array([0])).next_masks is None


def loss_of(values, log_prob, entropy, returns):
    advantages = returns - values.detach()
    return -(advantages * log_prob).mean() - 0.01 * entropy.mean() + 0.5 * F.mse_loss(values, returns)


def gradient(policy, values, log_prob, entropy, returns, recorded):
    policy.zero_grad(set_to_none=True)
    loss_of(values.flatten(), log_prob, entropy, returns).backward()
    recorded.backward()
    return [param.grad.clone() for param in policy.parameters()]


def test_an_envs_update_from_the_shared_passes_is_the_one_it_would_make_alone():
    """The rows of one env in the segment's buffer give, to float rounding, the gradient a worker with that env alone
    computes at the same θ' from the same steps."""
    rng = np.random.default_rng(0)
    images = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs = [rng.integers(0, 256, (N_ENVS, 84, 84, 4), dtype=np.uint8).transpose(0, 3, 1, 2) for _ in range(N_STEPS)]
    actions = torch.as_tensor(rng.integers(0, 6, (N_STEPS, N_ENVS))).flatten()  # time-major
    returns = torch.linspace(-1.0, 2.0, N_STEPS)

    torch.manual_seed(0)
    shared_policy = A3CCnnPolicy(images, spaces.Discrete(6), lambda _: 7e-4)
    shared = RecordedActivationsUpdate(shared_policy)
    shared.start_segment()
    for step in obs:
        shared.act(step)
    torch.manual_seed(0)
    alone_policy = A3CCnnPolicy(images, spaces.Discrete(6), lambda _: 7e-4)
    alone = RecordedActivationsUpdate(alone_policy)

    for env in range(N_ENVS):
        rows = torch.arange(N_STEPS) * N_ENVS + env
        got = gradient(shared_policy, *shared.evaluate_actions(actions[rows], rows), returns, shared)
        alone.start_segment()
        for step in obs:
            alone.act(step[env : env + 1])
        expected = gradient(alone_policy, *alone.evaluate_actions(actions[rows]), returns, alone)
        for (name, _), want, have in zip(alone_policy.named_parameters(), expected, got, strict=True):
            assert want.abs().max() > 0, name
            # float rounding: the convolutions run on batches of another size
            torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()), msg=name)


def masked_cartpole() -> gym.Env:
    return ActionMasker(gym.make("CartPole-v1"), lambda env: np.array([True, env.unwrapped.steps_beyond_terminated is None]))


@pytest.mark.parametrize(
    "policy, env",
    [
        ("MlpPolicy", "CartPole-v1"),
        ("MlpLstmPolicy", "CartPole-v1"),
        ("CnnPolicy", lambda: FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, discrete=True)),
        ("MlpPolicy", masked_cartpole),
    ],
)
@pytest.mark.parametrize("separate_updates", [True, False])
def test_one_update_per_actor_learner_and_every_step_counted(policy, env, separate_updates):
    kwargs = dict(policy_kwargs=dict(lstm_hidden_size=8)) if "Lstm" in policy else {}
    model = A3C(
        policy, env, n_workers=1, n_envs_per_worker=N_ENVS, n_steps=N_STEPS, separate_updates=separate_updates, seed=0,
        backend="serial", **kwargs,
    )  # fmt: skip
    model.learn(20 * N_STEPS * N_ENVS)
    segments, rest = divmod(model.num_timesteps, N_STEPS * N_ENVS)
    assert rest == 0 and segments >= 20
    assert model._async_counters() == {"updates": segments * (N_ENVS if separate_updates else 1)}


@pytest.mark.parametrize("model_class", [AsyncNStepQ, AsyncOneStepQ, AsyncSarsa])
@pytest.mark.parametrize("policy, env", [("MlpPolicy", "CartPole-v1"), ("MlpPolicy", masked_cartpole)])
@pytest.mark.parametrize("separate_updates", [True, False])
def test_async_q_makes_one_update_per_actor_learner(model_class, policy, env, separate_updates):
    model = model_class(
        policy, env, n_workers=1, n_envs_per_worker=N_ENVS, n_steps=N_STEPS, separate_updates=separate_updates, seed=0,
        backend="serial",
    )  # fmt: skip
    model.learn(20 * N_STEPS * N_ENVS)
    segments, rest = divmod(model.num_timesteps, N_STEPS * N_ENVS)
    assert rest == 0 and segments >= 20
    assert model._async_counters() == {"updates": segments * (N_ENVS if separate_updates else 1)}


def test_async_q_separate_updates_are_each_envs_gradient_at_the_workers_snapshot():
    """One segment with plain SGD: the separate updates move θ by lr times the sum of each env's own gradient, each
    taken at the worker's θ' (not at the θ its siblings already moved), each env's loss its own steps' sum; the joint
    update moves it by that sum over the envs' mean, so by exactly 1 / n_envs as far. Same seed, ε = 1: both runs
    see the same transitions."""

    def moved(separate_updates: bool) -> list[torch.Tensor]:
        model = AsyncOneStepQ(
            "MlpPolicy", "CartPole-v1", learning_rate=0.01, n_workers=1, n_envs_per_worker=N_ENVS, n_steps=N_STEPS,
            separate_updates=separate_updates, optimizer="sgd", optimizer_kwargs=dict(momentum=0.0),
            target_update_interval=10**6, exploration_initial_eps=1.0, exploration_final_eps=1.0, seed=0,
            backend="serial",
        )  # fmt: skip
        start = [param.detach().clone() for param in model.q_net.parameters()]
        model.learn(N_STEPS * N_ENVS)
        assert model._async_counters() == {"updates": N_ENVS if separate_updates else 1}  # one segment
        return [param.detach() - begin for param, begin in zip(model.q_net.parameters(), start, strict=True)]

    for separate, joint in zip(moved(True), moved(False), strict=True):
        assert joint.abs().max() > 0
        torch.testing.assert_close(separate, N_ENVS * joint, rtol=1e-4, atol=1e-7)


def test_separate_updates_must_be_a_bool():
    for model_class in (A3C, AsyncNStepQ):
        with pytest.raises(TypeError, match="separate_updates"):
            model_class("MlpPolicy", "CartPole-v1", separate_updates="yes")
