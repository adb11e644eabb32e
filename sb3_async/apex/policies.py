"""The dueling Q network of Ape-X DQN (Wang et al. 2016, "Dueling Network Architectures", as used by Ape-X §3.1)."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, NatureCNN, create_mlp
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn


class DuelingQNetwork(QNetwork):
    """SB3's ``QNetwork`` with a dueling head: ``q(s, a) = v(s) + a(s, a) - mean_a' a(s, a')`` (Wang et al. 2016, eq. 9).

    The features extractor and the ``net_arch`` hidden layers are shared; the value and advantage streams are one
    linear layer each on top. ``q_net`` holds the hidden layers, so SB3 code that reads ``q_net`` still works.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Discrete,
        features_extractor: BaseFeaturesExtractor,
        features_dim: int,
        net_arch: list[int] | None = None,
        activation_fn: type[nn.Module] = nn.ReLU,
        normalize_images: bool = True,
    ) -> None:
        super().__init__(
            observation_space, action_space, features_extractor, features_dim, net_arch, activation_fn, normalize_images
        )
        self.q_net = nn.Sequential(*create_mlp(self.features_dim, -1, self.net_arch, self.activation_fn))
        hidden = self.net_arch[-1] if self.net_arch else self.features_dim
        self.value_head = nn.Linear(hidden, 1)
        self.advantage_head = nn.Linear(hidden, int(action_space.n))

    def forward(self, obs: PyTorchObs) -> torch.Tensor:
        latent = self.q_net(self.extract_features(obs, self.features_extractor))
        advantages = self.advantage_head(latent)
        return self.value_head(latent) + advantages - advantages.mean(dim=1, keepdim=True)


class DuelingDQNPolicy(DQNPolicy):
    """SB3's ``DQNPolicy`` with :class:`DuelingQNetwork` for the online and the target network (``"MlpPolicy"``)."""

    def make_q_net(self) -> DuelingQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return DuelingQNetwork(**net_args).to(self.device)


class DuelingCnnPolicy(DuelingDQNPolicy):
    """The Ape-X Atari network (``"CnnPolicy"``): the Nature CNN (three conv layers and 512 units, SB3's ``NatureCNN``)
    with the dueling value and advantage heads on its features."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Schedule, **kwargs: Any):
        kwargs.setdefault("features_extractor_class", NatureCNN)
        kwargs.setdefault("net_arch", [])
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)  # type: ignore[arg-type]
