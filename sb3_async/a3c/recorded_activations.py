"""A3C's update from its acting passes on the paper's Atari network: the same gradient without running the segment's
observations through the network again."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.preprocessing import is_image_space

from sb3_async.common.policies import MnihActivations, MnihCNN
from sb3_async.common.torch_utils import has_categorical_head, sample_categorical, to_tensor


class RecordedActivationsUpdate:
    """A3C's update computed from the activations recorded while acting, on the paper's Atari network. A segment's
    acting passes serve its update: θ' is fixed over a segment (synchronized before its first step), so
    the features the loss needs of the segment's observations are those of the forward passes that chose its actions.

    For a policy on the paper's network (:class:`~sb3_async.common.policies.MnihCNN`, shared by the policy and value
    heads, a categorical head) a worker keeps the activations of those passes and backpropagates through them
    (:meth:`~sb3_async.common.policies.MnihCNN.backward_recorded`) instead of running the segment's observations
    through the network again: the same gradient, from autograd's own kernels, without the update's forward pass.

    :param policy: the worker's policy θ'
    """

    def __init__(self, policy: ActorCriticPolicy):
        self.policy = policy
        self.extractor: MnihCNN = policy.features_extractor  # type: ignore[assignment]
        space = policy.observation_space
        self.normalize = isinstance(space, spaces.Box) and policy.normalize_images and is_image_space(space)
        self.buffer: MnihActivations | None = None  # the segment's activations, row after row
        self.layout: tuple[Any, bool] | None = None  # the shape and contiguity of the observations it holds
        self.rows = 0
        self.segment: MnihActivations | None = None
        self.features: torch.Tensor | None = None

    @staticmethod
    def supports(policy: BasePolicy) -> bool:
        """Whether ``policy`` has the network and heads this class knows how to backpropagate through."""
        return (
            isinstance(policy, ActorCriticPolicy)
            and not isinstance(policy, RecurrentActorCriticPolicy)
            and policy.share_features_extractor
            and type(policy.features_extractor) is MnihCNN
            and has_categorical_head(policy)
            and not policy.use_sde
        )

    def start_segment(self) -> None:
        self.rows = 0

    def _next_rows(self, obs: torch.Tensor) -> MnihActivations:
        """Room for a step's activations after the segment's: the buffer of the segments before, grown (twice over)
        when a step does not fit or its observations come in another shape or memory layout."""
        batch, buffer, layout = obs.shape[0], self.buffer, (obs.shape[1:], obs.is_contiguous())
        if buffer is None or self.rows + batch > len(buffer.observations) or layout != self.layout:
            grown = MnihActivations.empty(self.extractor, 2 * (self.rows + batch), obs)
            if buffer is not None and self.rows:  # the segment's earlier steps move along (copy_ takes any layout)
                if obs.shape[1:] != buffer.observations.shape[1:]:
                    raise ValueError(f"Observations of shape {tuple(obs.shape[1:])} within a segment of another shape")
                for name in ("observations", "hidden1", "hidden2", "features"):
                    getattr(grown, name)[: self.rows].copy_(getattr(buffer, name)[: self.rows])
            self.buffer, self.layout, buffer = grown, layout, grown
        self.rows += batch
        return buffer.rows(self.rows - batch, self.rows)

    def act(self, obs: Any) -> np.ndarray:
        """Sample actions for a step's observations, as :func:`~sb3_async.common.torch_utils.sample_actions`, and keep
        the activations of the forward pass (written into the segment's buffer: the values SB3's ``preprocess_obs``
        and the network's forward pass give, without allocating them)."""
        observations = to_tensor(obs)
        rows = self._next_rows(observations)
        images = rows.observations.copy_(observations)  # preprocess_obs: obs.float() / 255.0, in place
        if self.normalize:
            images.div_(255.0)
        features, _ = self.extractor.forward_recorded(images, into=rows)
        return sample_categorical(self.policy, features)

    def evaluate_actions(
        self, actions: torch.Tensor, rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Values, log-probabilities and entropies of the segment's steps (time-major, as the segment), differentiable
        with respect to the heads and to the recorded features (:meth:`backward` takes it from there).

        :param actions: the actions of those steps (of ``rows``)
        :param rows: these rows of the segment's batch only (default: all)
        """
        assert self.buffer is not None
        self.segment = self.buffer.rows(0, self.rows)
        if rows is not None:
            self.segment = self.segment.select(rows)
        self.features = self.segment.features.detach().requires_grad_()
        latent_pi, latent_vf = self.policy.mlp_extractor(self.features)
        distribution = self.policy._get_action_dist_from_latent(latent_pi)
        return self.policy.value_net(latent_vf), distribution.log_prob(actions), distribution.entropy()

    def backward(self) -> None:
        """After the loss's backward pass: the network's gradient from the features' (``GradientWorker.apply_gradients``'s
        ``after_backward``)."""
        assert self.segment is not None and self.features is not None and self.features.grad is not None
        self.extractor.backward_recorded(self.segment, self.features.grad)
        self.segment = self.features = None
