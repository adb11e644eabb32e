"""A prioritized replay that keeps, with each transition, the action mask of its next state (sb3-contrib's
``action_masks()``): Ape-X DQN's learner then takes its double-Q argmax over the next state's legal actions only
(:func:`~sb3_async.apex.transitions.double_q_values`), as sb3-contrib's ``MaskableRolloutBuffer`` keeps the masks of
``MaskablePPO``'s rollouts."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer


class MaskedPrioritizedReplayBuffer(PrioritizedReplayBuffer):
    """:class:`~sb3_async.common.buffers.prioritized.PrioritizedReplayBuffer` with one next-state action mask per
    transition: :meth:`add` and :meth:`extend` take them (``next_masks``, all legal when not given) and
    :meth:`next_masks` gives those of a sample's ``indices``. One-step transitions only (Ape-X's actors build the
    n-step returns themselves) and no ``optimize_memory_usage``.

    Parameters: :class:`~sb3_async.common.buffers.prioritized.PrioritizedReplayBuffer`; the action space must be
    ``Discrete``.
    """

    def __init__(self, buffer_size: int, observation_space: spaces.Space, action_space: spaces.Space, **kwargs: Any):
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"Invalid action_space={action_space}: action masks need a Discrete action space")
        if int(kwargs.get("n_steps", 1)) != 1 or kwargs.get("optimize_memory_usage", False):
            raise ValueError(f"{type(self).__name__} stores one-step transitions, without optimize_memory_usage")
        super().__init__(buffer_size, observation_space, action_space, **kwargs)
        self.n_actions = int(action_space.n)
        #: the legal actions of each transition's next state, ``(buffer_size, n_envs, n_actions)``
        self.next_action_masks = np.ones((self.buffer_size, self.n_envs, self.n_actions), dtype=bool)

    def extend(  # type: ignore[override]
        self,
        obs: np.ndarray,
        next_obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[list[dict[str, Any]]] | None,
        priorities: np.ndarray | None = None,
        next_masks: np.ndarray | None = None,
    ) -> None:
        """:meth:`PrioritizedReplayBuffer.extend`, with the next states' masks ``(T, n_envs, n_actions)``."""
        steps = len(reward)
        rows = (self.pos + np.arange(steps)) % self.buffer_size
        shape = (steps, self.n_envs, self.n_actions)
        if next_masks is None:
            masks = np.ones(shape, dtype=bool)
        else:
            masks = np.asarray(next_masks, dtype=bool)
            if masks.size != np.prod(shape):
                raise ValueError(f"Invalid next_masks of shape {masks.shape}: expected {shape}")
        super().extend(obs, next_obs, action, reward, done, infos, priorities=priorities)  # checks the block first
        self.next_action_masks[rows] = masks.reshape(shape)

    def next_masks(self, indices: np.ndarray) -> np.ndarray:
        """``(len(indices), n_actions)`` next-state masks of the transitions of a sample's ``indices``."""
        rows, envs = np.divmod(np.asarray(indices, dtype=np.int64) % self.capacity, self.n_envs)
        return self.next_action_masks[rows, envs]
