"""The players that sit at a :class:`~sb3_async.env_pool.turns.TurnBasedGame`'s other seats.

- :class:`PolicyPlayer` plays with a policy over the legal moves: an actor-critic policy samples its masked
  distribution (or takes its mode), a Q-network policy takes its best legal move. Each worker of an algorithm attaches
  one over its own copy of the policy to its games (:func:`attach_self_play`): self-play with one shared policy.
- :class:`ModelPlayer` plays with a trained model, given as the model or as a saved file (loaded in the process
  that plays, so that a pool's env processes can hold it): a fixed opponent.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from sb3_async.common.masks import masked_argmax, masked_policy
from sb3_async.common.torch_utils import has_categorical_head, sample_actions
from sb3_async.env_pool.turns import TurnBasedGame

__all__ = ["ModelPlayer", "PolicyPlayer", "attach_self_play", "self_play_epsilons"]


#: Layers whose output depends on the training mode (dropout, batch and instance normalization).
_MODE_DEPENDENT = (torch.nn.modules.dropout._DropoutNd, torch.nn.modules.batchnorm._NormBase)


class PolicyPlayer:
    """Plays a seat with ``policy``: never an illegal move.

    :param policy: an SB3 policy: actor-critic (A3C's, ``MaskablePPO``'s) or with a ``q_net`` (the async Q family's,
        Ape-X DQN's)
    :param deterministic: the mode of an actor-critic policy's distribution instead of a sample (a Q-network policy
        always takes its best legal move)
    :param epsilon: the probability of a uniformly random legal move instead
    :param seed: seeds those random moves
    """

    def __init__(self, policy: Any, deterministic: bool = False, epsilon: float = 0.0, seed: int | None = None):
        self.policy, self.deterministic, self.epsilon = policy, deterministic, epsilon
        self._rng = np.random.default_rng(seed)
        self._q = hasattr(policy, "q_net")
        # an actor-critic policy with SB3's categorical head and no LSTM: its masked logits sampled directly (the
        # distribution of predict() with the mask, without building it)
        self._logits = not self._q and getattr(policy, "lstm_actor", None) is None and has_categorical_head(policy)
        # eval mode only changes what dropout and normalization layers do: without them the mode is left alone
        self._modes_matter = any(isinstance(module, _MODE_DEPENDENT) for module in policy.modules())

    def __call__(self, observation: Any, action_mask: np.ndarray) -> int:
        policy = self.policy
        mask = np.asarray(action_mask, dtype=bool)[None]
        if self.epsilon > 0 and self._rng.random() < self.epsilon:
            return int(self._rng.choice(np.flatnonzero(mask[0])))
        training = policy.training
        try:
            if self._modes_matter:
                policy.set_training_mode(False)
            if self._q or self._logits:
                obs_tensor, _ = policy.obs_to_tensor(observation)
                if self._logits:
                    return int(sample_actions(policy, obs_tensor, masks=mask, deterministic=self.deterministic)[0])
                with torch.no_grad():
                    q_values = policy.q_net(obs_tensor).cpu().numpy()
                return int(masked_argmax(q_values, mask)[0])
            with masked_policy(policy, mask):
                action, _ = policy.predict(observation, deterministic=self.deterministic)
            return int(np.asarray(action).reshape(-1)[0])
        finally:
            if self._modes_matter:
                policy.set_training_mode(training)


class ModelPlayer:
    """Plays a seat with a trained model: ``model.predict(observation, action_masks=mask)``.

    :param model: the model, or the path of a saved one (loaded with ``algorithm.load`` where the player first plays,
        so that the player pickles as a path; a path with no file, nor with ``.zip`` added, is refused here)
    :param algorithm: the model's class, with a path (e.g. ``A3C``; sb3-contrib's ``MaskablePPO`` works too)
    :param deterministic: ``predict``'s ``deterministic``
    """

    def __init__(
        self, model: BaseAlgorithm | str | os.PathLike[str], algorithm: type | None = None, deterministic: bool = True
    ):
        if not isinstance(model, BaseAlgorithm):
            if algorithm is None:
                raise ValueError("ModelPlayer needs algorithm= (the model's class, e.g. A3C) to load a saved model")
            if not isinstance(model, (str, os.PathLike)):
                raise TypeError(f"Invalid model={model!r}: expected a model or the path of a saved one")
            model = os.fspath(model)
            if not (os.path.isfile(model) or os.path.isfile(model + ".zip")):  # load() adds ".zip" as SB3's does
                raise FileNotFoundError(f"Invalid model={model!r}: no saved model at this path (nor at {model + '.zip'!r})")
        self.model: Any = model
        self.algorithm: Any = algorithm
        self.deterministic = deterministic

    def __call__(self, observation: Any, action_mask: np.ndarray) -> int:
        if not isinstance(self.model, BaseAlgorithm):
            self.model = self.algorithm.load(self.model, device="cpu")
        model: Any = self.model
        masks = np.asarray(action_mask, dtype=bool)
        action, _ = model.predict(observation, action_masks=masks, deterministic=self.deterministic)
        return int(np.asarray(action).reshape(-1)[0])

    def __getstate__(self) -> dict[str, Any]:
        if isinstance(self.model, BaseAlgorithm):
            raise TypeError("A ModelPlayer of a model in memory cannot be pickled: give it the path of a saved model")
        return dict(vars(self))


#: The range of ε, the probability that the policy playing the other seats in self-play moves at random instead. Each
#: game of a worker gets its own ε, spread evenly over the range (:func:`self_play_epsilons`), as the asynchronous
#: Q-learning paper gives each actor its own ε: the learner meets its own play, random play and the mixes between. The
#: policy alone narrows to a few lines of play (a Q-network takes its best move, an actor-critic's samples narrow as
#: its entropy falls) and the learner forgets how to answer others: A3C's connect four entry, evaluated against a
#: random player every 300k steps, scored a mean return of 0.75-0.97 with ε 0.2 in every game, 0.91-0.98 with the range.
SELF_PLAY_EPSILONS = (0.0, 1.0)


def self_play_epsilons(n_games: int, seed: int | None = None) -> np.ndarray:
    """The ε of each of a worker's ``n_games`` self-play games: spread evenly over :data:`SELF_PLAY_EPSILONS`, ends
    included (the first game's other seats are the policy alone, the last's a random legal player); a lone game draws
    its ε uniformly from the range with ``seed`` (each worker its own)."""
    low, high = SELF_PLAY_EPSILONS
    if n_games == 1:
        return np.random.default_rng(seed).uniform(low, high, size=1)
    return np.linspace(low, high, n_games)


def attach_self_play(env: VecEnv, policy: Any, seed: int | None = None) -> int:
    """Let ``policy`` play the other seats of every :class:`TurnBasedGame` of ``env`` (a worker's env copies in this
    process) whose opponent is ``"self"``: a random legal move with the game's probability ε
    (:func:`self_play_epsilons`), else the policy's (an actor-critic policy samples it, a Q-network policy takes its
    best); returns how many games it joined."""
    base = env.unwrapped
    games = [inner.unwrapped for inner in getattr(base, "envs", [])]
    joined = [game for game in games if isinstance(game, TurnBasedGame) and game.opponent == "self"]
    for index, (game, epsilon) in enumerate(zip(joined, self_play_epsilons(len(joined), seed))):
        game.attach_player(PolicyPlayer(policy, epsilon=float(epsilon), seed=None if seed is None else seed * 1009 + index))
    return len(joined)
