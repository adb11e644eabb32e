"""A3C's update from the acting passes' activations (``RecordedActivationsUpdate``): the same actions and the same gradient as
the policy's own forward and backward passes."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import NatureCNN
from torch.nn import functional as F

from sb3_async.a3c.recorded_activations import RecordedActivationsUpdate
from sb3_async.common.policies import A3CCnnLstmPolicy, A3CCnnPolicy, MnihActivations, MnihCNN
from sb3_async.common.torch_utils import sample_actions

IMAGES = spaces.Box(0, 255, (4, 84, 84), np.uint8)
N_STEPS, N_ENVS = 5, 3


def policy(**kwargs):
    torch.manual_seed(0)
    return A3CCnnPolicy(IMAGES, spaces.Discrete(6), lambda _: 7e-4, **kwargs)


def segment_obs(seed: int = 0) -> list[np.ndarray]:
    """A segment's observations as the workers' envs give them: channel-first views of channel-last frames (the
    reference batch is contiguous: rounding differs by about 1e-7)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (N_ENVS, 84, 84, 4), dtype=np.uint8).transpose(0, 3, 1, 2) for _ in range(N_STEPS)]


def loss_of(values, log_prob, entropy, returns):
    advantages = returns - values.detach()
    return -(advantages * log_prob).mean() - 0.01 * entropy.mean() + 0.5 * F.mse_loss(values, returns)


def test_same_actions_and_gradient_as_the_policy():
    obs = segment_obs()
    returns = torch.linspace(-1.0, 2.0, N_STEPS * N_ENVS)

    reference = policy()
    torch.manual_seed(1)
    expected_actions = [sample_actions(reference, step) for step in obs]
    actions = torch.as_tensor(np.concatenate(expected_actions)).long()
    values, log_prob, entropy = reference.evaluate_actions(torch.as_tensor(np.concatenate(obs)), actions)
    loss_of(values.flatten(), log_prob, entropy, returns).backward()

    recorded_policy = policy()
    recorded = RecordedActivationsUpdate(recorded_policy)
    recorded.start_segment()
    torch.manual_seed(1)
    recorded_actions = [recorded.act(step) for step in obs]
    values, log_prob, entropy = recorded.evaluate_actions(actions)
    loss_of(values.flatten(), log_prob, entropy, returns).backward()
    recorded.backward()

    for expected, got in zip(expected_actions, recorded_actions, strict=True):
        np.testing.assert_array_equal(got, expected)
    for (name, param), recorded_param in zip(reference.named_parameters(), recorded_policy.parameters(), strict=True):
        assert recorded_param.grad is not None, name
        assert param.grad.abs().max() > 0, name
        torch.testing.assert_close(recorded_param.grad, param.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_each_segment_starts_afresh():
    recorded = RecordedActivationsUpdate(policy())
    for seed in range(2):
        recorded.start_segment()
        for step in segment_obs(seed)[:2]:
            recorded.act(step)
        values, _, _ = recorded.evaluate_actions(torch.zeros(2 * N_ENVS, dtype=torch.long))
        assert values.shape == (2 * N_ENVS, 1)
        values.sum().backward()
        recorded.backward()


def test_supports_only_the_shared_paper_network_with_a_categorical_head():
    assert RecordedActivationsUpdate.supports(policy())
    assert not RecordedActivationsUpdate.supports(policy(share_features_extractor=False))
    assert not RecordedActivationsUpdate.supports(policy(features_extractor_class=NatureCNN))

    class OwnCNN(MnihCNN):
        def forward(self, observations):
            return super().forward(observations) * 2

    assert not RecordedActivationsUpdate.supports(policy(features_extractor_class=OwnCNN))
    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert not RecordedActivationsUpdate.supports(A3CCnnPolicy(IMAGES, box, lambda _: 7e-4))
    assert not RecordedActivationsUpdate.supports(A3CCnnLstmPolicy(IMAGES, spaces.Discrete(6), lambda _: 7e-4))


@pytest.mark.parametrize("width", [36, 84])
def test_backward_recorded_matches_autograd(width):
    torch.manual_seed(0)
    net = MnihCNN(spaces.Box(0, 255, (2, width, width), np.uint8), features_dim=32)
    images = torch.rand(7, 2, width, width)
    weights = torch.randn(7, 32)
    (net(images) * weights).sum().backward()
    expected = [param.grad.clone() for param in net.parameters()]
    net.zero_grad(set_to_none=True)
    features, activations = net.forward_recorded(images)
    assert not features.requires_grad
    net.backward_recorded(activations, weights)
    for want, param in zip(expected, net.parameters(), strict=True):
        torch.testing.assert_close(param.grad, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("channels_last", [True, False])
def test_segment_buffer_holds_what_the_forward_passes_give(channels_last):
    """The activations written in place into the segment's buffer are, bit for bit, those of SB3's ``preprocess_obs``
    and the network's own passes, concatenated; from segment to segment, with the buffer growing and its layout
    changing."""
    recorded = RecordedActivationsUpdate(policy())
    for seed, n_steps in [(0, N_STEPS), (1, 2), (2, N_STEPS + 3)]:
        obs = segment_obs(seed)[:2] * 4
        obs = [step if channels_last else np.ascontiguousarray(step) for step in obs[:n_steps]]
        recorded.start_segment()
        for step in obs:
            recorded.act(step)
        recorded.evaluate_actions(torch.zeros(n_steps * N_ENVS, dtype=torch.long))
        passes = [recorded.extractor.forward_recorded(torch.as_tensor(step).float() / 255.0)[1] for step in obs]
        for field in fields(MnihActivations):
            expected = torch.cat([getattr(activations, field.name) for activations in passes])
            assert torch.equal(getattr(recorded.segment, field.name), expected), field.name
