"""Networks of the A3C paper, as SB3 features extractors and policies."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, cast

import torch
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticCnnPolicy
from stable_baselines3.common.distributions import DiagGaussianDistribution, Distribution
from stable_baselines3.common.policies import ActorCriticCnnPolicy, ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.dqn.policies import CnnPolicy as DQNCnnPolicy
from stable_baselines3.dqn.policies import DQNPolicy
from torch import nn


def with_target_synced(policy: DQNPolicy) -> DQNPolicy:
    """``policy`` with its target network θ⁻ a copy of its Q-network θ, in evaluation mode (a new DQN policy's)."""
    policy.q_net_target.load_state_dict(policy.q_net.state_dict())  # θ⁻ ← θ
    policy.q_net_target.set_training_mode(False)
    return policy


def mnih_cnn_defaults(policy: str, observation_space: spaces.Space, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A CNN policy's keyword arguments with the paper's :class:`MnihCNN` as default features extractor and no hidden
    layer after it (``net_arch=[]``), after checking that ``observation_space`` suits the extractor
    (:func:`check_image_observations`)."""
    kwargs = {"features_extractor_class": MnihCNN, "net_arch": [], **kwargs}
    check_image_observations(policy, observation_space, kwargs["features_extractor_class"])
    return kwargs


def check_image_observations(policy: str, observation_space: spaces.Space, features_extractor_class: type) -> None:
    """``ValueError`` naming ``policy`` and the space unless the space holds images, channels first (a ``Box`` of shape
    ``(channels, height, width)``), when the policy's features extractor is :class:`MnihCNN` (a convolution of images;
    on vectors it would fail inside torch at the first step)."""
    if features_extractor_class is not MnihCNN:
        return
    if isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 3:
        return
    raise ValueError(
        f"Invalid policy={policy!r} for the observation space {observation_space}: {policy} is a convolutional network "
        "for images, a Box of shape (channels, height, width); use 'MlpPolicy' for vectors (or 'MultiInputPolicy' for "
        "a Dict space)"
    )


class MnihCNN(BaseFeaturesExtractor):
    """The Atari network of Mnih et al. 2013, used by every method of the A3C paper (supp. §2).

    16 filters 8×8 stride 4, 32 filters 4×4 stride 2, a fully connected layer of 256 units, each followed by a ReLU.

    :param observation_space: an image space, channels first (SB3's ``VecTransposeImage`` does that)
    :param features_dim: units of the fully connected layer (256 in the paper)
    """

    def __init__(self, observation_space: spaces.Box, features_dim: int = 256):
        super().__init__(observation_space, features_dim)
        n_channels = observation_space.shape[0]
        self.cnn = nn.Sequential(
            nn.Conv2d(n_channels, 16, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(16, 32, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_flatten = self.cnn(torch.as_tensor(observation_space.sample()[None]).float()).shape[1]
        self.linear = nn.Sequential(nn.Linear(n_flatten, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.linear(self.cnn(observations))

    def _layers(self) -> tuple[nn.Conv2d, nn.Conv2d, nn.Linear]:
        return cast(nn.Conv2d, self.cnn[0]), cast(nn.Conv2d, self.cnn[2]), cast(nn.Linear, self.linear[0])

    def forward_recorded(
        self, observations: torch.Tensor, into: MnihActivations | None = None
    ) -> tuple[torch.Tensor, MnihActivations]:
        """:meth:`forward` without gradients, keeping what :meth:`backward_recorded` needs of it.

        :param into: where to write the activations (rows of :meth:`MnihActivations.empty`, whose ``observations``
            are ``observations``): the same values, without allocating them
        """
        conv1, conv2, linear = self._layers()
        with torch.no_grad():
            if into is None:
                hidden1 = torch.relu(conv1(observations))
                hidden2 = torch.relu(conv2(hidden1))
                flat = hidden2.flatten(1)
                features = torch.relu(linear(flat))
                return features, MnihActivations(observations, hidden1, hidden2, flat, features)
            torch.clamp_min(conv1(observations), 0, out=into.hidden1)  # ReLU, as torch.relu computes it
            torch.clamp_min(conv2(into.hidden1), 0, out=into.hidden2)
            torch.clamp_min(linear(into.flat), 0, out=into.features)
        return into.features, into

    def backward_recorded(self, activations: MnihActivations, grad_features: torch.Tensor) -> None:
        """Backpropagate ``grad_features``, the gradient of a loss with respect to the features of
        :meth:`forward_recorded` (``activations``), into the ``.grad`` of this network's parameters (set, not added).

        The same operations as autograd's backward pass through :meth:`forward` (no gradient with respect to the
        observations), without running the forward pass again.
        """
        conv1, conv2, linear = self._layers()
        act = activations
        with torch.no_grad():
            grad = torch.ops.aten.threshold_backward(grad_features, act.features, 0)  # ReLU
            _set_grads(linear, grad.T @ act.flat, grad.sum(0))
            grad = torch.ops.aten.threshold_backward((grad @ linear.weight).view(act.hidden2.shape), act.hidden2, 0)
            grad, weight_grad, bias_grad = _conv_backward(conv2, grad, act.hidden1, input_grad=True)
            _set_grads(conv2, weight_grad, bias_grad)
            grad = torch.ops.aten.threshold_backward(grad, act.hidden1, 0)
            _, weight_grad, bias_grad = _conv_backward(conv1, grad, act.observations, input_grad=False)
            _set_grads(conv1, weight_grad, bias_grad)


def _set_grads(layer: nn.Conv2d | nn.Linear, weight_grad: torch.Tensor, bias_grad: torch.Tensor) -> None:
    layer.weight.grad = weight_grad
    if layer.bias is not None:
        layer.bias.grad = bias_grad


def _conv_backward(
    conv: nn.Conv2d, grad_output: torch.Tensor, inputs: torch.Tensor, input_grad: bool
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Gradients of a convolution's input (if ``input_grad``), weight and bias: autograd's own backward kernel."""
    return torch.ops.aten.convolution_backward(
        grad_output,
        inputs,
        conv.weight,
        [conv.out_channels],
        list(conv.stride),
        list(conv.padding),  # type: ignore[arg-type]
        list(conv.dilation),
        False,
        [0, 0],
        conv.groups,
        [input_grad, True, True],
    )


@dataclass
class MnihActivations:
    """What :meth:`MnihCNN.backward_recorded` needs of a forward pass: its input and each layer's output."""

    observations: torch.Tensor
    hidden1: torch.Tensor
    hidden2: torch.Tensor
    flat: torch.Tensor
    features: torch.Tensor

    @staticmethod
    def empty(net: MnihCNN, rows: int, observations: torch.Tensor) -> MnihActivations:
        """Room for the activations of ``rows`` observations shaped as ``observations`` (one batch), in the memory
        layout the network's passes give them: the input's (channel-last or not), and the second convolution's
        output channel-first so that ``flat`` is a view of it."""
        conv1, conv2, linear = net._layers()
        shape1 = (rows, conv1.out_channels, *_conv_output_size(conv1, observations.shape[-2:]))
        shape2 = (rows, conv2.out_channels, *_conv_output_size(conv2, shape1[-2:]))
        channels_last = observations.dim() == 4 and observations.is_contiguous(memory_format=torch.channels_last)
        layout = torch.channels_last if channels_last and not observations.is_contiguous() else torch.contiguous_format
        hidden2 = torch.empty(shape2)
        return MnihActivations(
            torch.empty((rows, *observations.shape[1:]), memory_format=layout),
            torch.empty(shape1, memory_format=layout),
            hidden2,
            hidden2.view(rows, -1),
            torch.empty(rows, linear.out_features),
        )

    def rows(self, start: int, stop: int) -> MnihActivations:
        """Rows ``start:stop`` of every activation (views)."""
        return MnihActivations(*(getattr(self, field.name)[start:stop] for field in fields(MnihActivations)))

    def select(self, rows: torch.Tensor) -> MnihActivations:
        """The rows ``rows`` of every activation (copies; ``flat`` a view of ``hidden2``, as in :meth:`empty`)."""
        hidden2 = self.hidden2.index_select(0, rows)
        return MnihActivations(
            self.observations.index_select(0, rows),
            self.hidden1.index_select(0, rows),
            hidden2,
            hidden2.view(len(rows), -1),
            self.features.index_select(0, rows),
        )


def _conv_output_size(conv: nn.Conv2d, size: Any) -> tuple[int, int]:
    """Height and width of ``conv``'s output for an input of spatial ``size`` (torch's formula)."""
    kernel, stride, dilation = conv.kernel_size, conv.stride, conv.dilation
    padding = cast(tuple[int, int], conv.padding)
    height, width = ((size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2))
    return height, width


class A3CCnnPolicy(ActorCriticCnnPolicy):
    """SB3's ``ActorCriticCnnPolicy`` with the paper's :class:`MnihCNN` as default features extractor.

    A softmax policy head and a linear value head on the shared 256-unit features, as in supp. §2: no hidden layer
    between them by default (SB3 adds two 64-unit layers per head for any extractor but its ``NatureCNN``).
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, **kwargs: Any):
        kwargs = mnih_cnn_defaults("CnnPolicy", observation_space, kwargs)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)


class A3CCnnLstmPolicy(RecurrentActorCriticCnnPolicy):
    """sb3-contrib's ``CnnLstmPolicy`` on the paper's network: :class:`MnihCNN` (256 units), then 256 LSTM cells,
    then the policy and value heads (A3C LSTM: "an additional 256 LSTM cells after the final hidden layer", §5.1).

    ``net_arch`` defaults to ``[]`` (no extra layer between the LSTM and the heads). Deviation: sb3-contrib gives the
    critic its own LSTM by default (``enable_critic_lstm=True``); its ``shared_lstm=True``, the paper's single LSTM,
    detaches the value path from the LSTM and the CNN, so the value loss would no longer train them.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, **kwargs: Any):
        kwargs = mnih_cnn_defaults("CnnLstmPolicy", observation_space, kwargs)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)


class AsyncQCnnPolicy(DQNCnnPolicy):
    """SB3's DQN ``CnnPolicy`` with the paper's :class:`MnihCNN` and, on its 256 features, "a single linear output
    unit for each action representing the action-value" (supp. §2): no extra hidden layer by default."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, **kwargs: Any):
        kwargs = mnih_cnn_defaults("CnnPolicy", observation_space, kwargs)
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)  # type: ignore[arg-type]


class SoftplusGaussianPolicy(ActorCriticPolicy):
    """The continuous-action actor-critic of the A3C paper (supp. §3).

    The mean ``μ`` is a linear layer and the (spherical) variance ``σ² = softplus(w·h + b)`` a function of the state,
    instead of SB3's state-independent ``log_std``. Policy and value networks share no parameters; by default
    one hidden layer of 200 ReLU units each, as the paper's low-dimensional encoder (without its LSTM). Pair it
    with ``ent_coef=1e-4``, the paper's cost on the Gaussian's differential entropy.
    """

    min_variance = 1e-6

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, **kwargs: Any):
        if not isinstance(action_space, spaces.Box):
            raise ValueError(f"SoftplusGaussianPolicy needs a Box action space, got {action_space}")
        kwargs.setdefault("net_arch", dict(pi=[200], vf=[200]))
        kwargs.setdefault("activation_fn", nn.ReLU)
        kwargs.setdefault("share_features_extractor", False)
        if kwargs.get("use_sde"):
            raise ValueError("SoftplusGaussianPolicy does not support use_sde=True")
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build(self, lr_schedule: Schedule) -> None:
        super()._build(lr_schedule)
        assert isinstance(self.action_dist, DiagGaussianDistribution)
        del self.log_std
        self.variance_net = nn.Linear(self.mlp_extractor.latent_dim_pi, 1)
        if self.ortho_init:
            self.variance_net.apply(lambda module: self.init_weights(module, gain=0.01))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        mean_actions = self.action_net(latent_pi)
        variance = nn.functional.softplus(self.variance_net(latent_pi)) + self.min_variance
        log_std = (0.5 * torch.log(variance)).expand_as(mean_actions)
        return self.action_dist.proba_distribution(mean_actions, log_std)  # type: ignore[arg-type]
