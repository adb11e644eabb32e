"""Turn-based games: the players that sit at a :class:`~sb3_async.env_pool.turns.TurnBasedGame`'s other seats, and
the evaluation of a model by the games it wins.

- :class:`PolicyPlayer` plays with a policy over the legal moves: an actor-critic policy samples its masked
  distribution (or takes its mode), a Q-network policy takes its best legal move. Each worker of an algorithm attaches
  one over its own copy of the policy to its games (:func:`attach_self_play`): self-play with one shared policy.
- :class:`ModelPlayer` plays with a trained model, given as the model or as a saved file (loaded in the process
  that plays, so a pool's worker processes can hold it): a fixed opponent.
- the workers report each game's seat and result with its episode, and ``learn()`` logs them per seat
  (:func:`record_seat_statistics`: ``rollout/seat_0_win_rate``...);
- :func:`play_games` plays a model against an opponent, the seats alternating, and counts wins, draws and losses
  per seat (:class:`GameResults`); :class:`GameEvalCallback` does it during ``learn()``, against a random legal
  player and against a frozen copy of the model from the previous evaluation, and logs the rates.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from sb3_async.common.masks import masked_argmax, masked_policy
from sb3_async.common.torch_utils import has_categorical_head, sample_actions
from sb3_async.env_pool.turns import OPPONENTS, Player, TurnBasedGame
from sb3_async.validation import check_int

__all__ = [
    "GameEvalCallback",
    "GameResults",
    "ModelPlayer",
    "PolicyPlayer",
    "attach_self_play",
    "self_play_epsilons",
    "play_games",
    "record_seat_statistics",
]


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
        so that the player pickles as a path)
    :param algorithm: the model's class, with a path (e.g. ``A3C``; sb3-contrib's ``MaskablePPO`` works too)
    :param deterministic: ``predict``'s ``deterministic``
    """

    def __init__(
        self, model: BaseAlgorithm | str | os.PathLike[str], algorithm: type | None = None, deterministic: bool = True
    ):
        if not isinstance(model, BaseAlgorithm):
            if algorithm is None:
                raise ValueError("ModelPlayer needs algorithm= (the model's class, e.g. A3C) to load a saved model")
            model = os.fspath(model)
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


def record_seat_statistics(logger: Any, episodes: Iterable[dict[str, Any]]) -> None:
    """Log ``rollout/seat_<k>_ep_rew_mean``, ``_win_rate`` and ``_loss_rate`` over the episodes of turn-based games in
    ``episodes`` (SB3's ``ep_info_buffer``: those with a ``"seat"``), one set per seat."""
    by_seat: dict[int, list[dict[str, Any]]] = {}
    for episode in episodes:
        if "seat" in episode:
            by_seat.setdefault(int(episode["seat"]), []).append(episode)
    for seat, played in sorted(by_seat.items()):
        results = np.array([episode["result"] for episode in played])
        logger.record(f"rollout/seat_{seat}_ep_rew_mean", float(np.mean([episode["r"] for episode in played])))
        logger.record(f"rollout/seat_{seat}_win_rate", float(np.mean(results == 1)))
        logger.record(f"rollout/seat_{seat}_loss_rate", float(np.mean(results == -1)))


@dataclass
class GameResults:
    """Wins, draws and losses of one player per seat over a match (``results[seat] = [wins, draws, losses]``)."""

    seats: list[str]
    results: dict[int, list[int]] = field(default_factory=dict)

    def add(self, seat: int, result: int) -> None:
        self.results.setdefault(seat, [0, 0, 0])[1 - result] += 1

    def rates(self, seat: int | None = None) -> tuple[float, float, float]:
        """The win, draw and loss rates over every game (``seat=None``) or the games of one seat."""
        counts = np.sum([counts for s, counts in self.results.items() if seat is None or s == seat], axis=0)
        total = max(1, int(np.sum(counts)))
        return float(counts[0]) / total, float(counts[1]) / total, float(counts[2]) / total

    @property
    def games(self) -> int:
        return int(sum(sum(counts) for counts in self.results.values()))

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """``{prefix}win_rate``, ``draw_rate``, ``loss_rate``, then the same per seat (``seat_0_win_rate``...)."""
        out: dict[str, float] = {}
        for seat in [None, *sorted(self.results)]:
            label = "" if seat is None else f"seat_{seat}_"
            for name, rate in zip(("win", "draw", "loss"), self.rates(seat), strict=True):
                out[f"{prefix}{label}{name}_rate"] = rate
        return out

    def __str__(self) -> str:
        parts = [f"{self.games} games: win {self.rates()[0]:.3f}, draw {self.rates()[1]:.3f}, loss {self.rates()[2]:.3f}"]
        for seat in sorted(self.results):
            win, draw, loss = self.rates(seat)
            parts.append(f"seat {seat} ({self.seats[seat]}): {win:.3f} / {draw:.3f} / {loss:.3f}")
        return "; ".join(parts)


def _as_player(opponent: Any, deterministic: bool) -> str | Player:
    if isinstance(opponent, str):
        if opponent not in OPPONENTS or opponent == "self":
            raise ValueError(f"Invalid opponent={opponent!r}: 'random', a model or a callable player")
        return opponent
    if isinstance(opponent, BaseAlgorithm):
        return ModelPlayer(opponent, deterministic=deterministic)
    if callable(opponent):
        return opponent
    raise TypeError(f"Invalid opponent={opponent!r}: 'random', a model or a callable player")


def play_games(
    model: Any,
    game: Callable[[], Any],
    n_games: int = 200,
    opponent: Any = "random",
    deterministic: bool = True,
    seed: int | None = None,
) -> GameResults:
    """Play ``n_games`` of the turn-based game against ``opponent``, the seats alternating (``n_games / seats`` at each),
    the moves from ``model.predict(obs, action_masks=mask)``: never an illegal one.

    :param model: anything with SB3's ``predict`` and ``action_masks`` (our algorithms, ``MaskablePPO``)
    :param game: a factory of the PettingZoo AEC env, e.g. ``connect_four_v3.env``
    :param opponent: ``"random"`` (a uniformly random legal move), a model (its ``predict``, ``deterministic`` as the
        model's), or a ``player(observation, action_mask)`` callable (e.g. :class:`PolicyPlayer`)
    :param deterministic: ``predict``'s ``deterministic`` for ``model`` (and a model ``opponent``). Two deterministic
        players repeat one game per seat: pass False for varied games
    :param seed: seeds the games and the random player
    """
    check_int("n_games", n_games)
    player = _as_player(opponent, deterministic)
    first = game()
    seats = list(first.possible_agents)
    first.close()
    results = GameResults(seats)
    rng = np.random.default_rng(seed)
    for seat in range(len(seats)):
        env = TurnBasedGame(game(), opponent=player, seat=seat)
        for _ in range(n_games // len(seats) + (seat < n_games % len(seats))):
            observation, _ = env.reset(seed=int(rng.integers(2**31)))
            done, info = False, dict[str, Any]()
            while not done:
                action, _ = model.predict(observation, action_masks=env.action_masks(), deterministic=deterministic)
                observation, _, terminated, truncated, info = env.step(int(np.asarray(action).reshape(-1)[0]))
                done = terminated or truncated
            results.add(seat, info["game"]["result"])
        env.close()
    return results


def _dummy_env(game: Callable[[], Any]) -> VecEnv:
    return DummyVecEnv([lambda: TurnBasedGame(game(), opponent="random")])


class GameEvalCallback(EvalCallback):
    """Plays ``n_games`` (seats alternating) every ``eval_freq`` calls during ``learn()`` and logs the win, draw and
    loss rates, overall and per seat, as ``eval/<opponent>/win_rate``, ``eval/<opponent>/seat_0_win_rate``... An
    ``EvalCallback``: with our algorithms the workers are parked while it plays, ``best_model_save_path`` keeps the
    model with the best score against the random player (win rate minus loss rate, its
    ``last_mean_reward``), and ``callback_on_new_best`` gets that score (e.g. ``StopTrainingOnRewardThreshold``).

    :param game: a factory of the PettingZoo AEC env, e.g. ``connect_four_v3.env``
    :param against: the opponents: ``"random"`` (a random legal player) and ``"previous"`` (a frozen copy of the
        model's policy from the previous evaluation, sampling its moves; skipped at the first evaluation)
    :param deterministic: the model's ``predict`` against the random player; against the previous copy it samples
    """

    def __init__(
        self,
        game: Callable[[], Any],
        eval_freq: int = 10_000,
        n_games: int = 100,
        against: Sequence[str] = ("random", "previous"),
        deterministic: bool = True,
        callback_on_new_best: Any = None,
        best_model_save_path: str | None = None,
        verbose: int = 1,
    ):
        check_int("n_games", n_games)
        for name in against:
            if name not in ("random", "previous"):
                raise ValueError(f"Invalid against={list(against)!r}: each one of 'random', 'previous'")
        super().__init__(
            _dummy_env(game),
            callback_on_new_best=callback_on_new_best,
            n_eval_episodes=n_games,
            eval_freq=eval_freq,
            best_model_save_path=best_model_save_path,
            deterministic=deterministic,
            verbose=verbose,
        )
        self.game, self.n_games, self.against = game, n_games, tuple(against)
        self._previous: Any = None
        #: Each evaluation's results: ``(num_timesteps, {opponent: GameResults})``
        self.history: list[tuple[int, dict[str, GameResults]]] = []

    def _on_step(self) -> bool:
        if self.eval_freq <= 0 or self.n_calls % self.eval_freq != 0:
            return True
        played: dict[str, GameResults] = {}
        if "random" in self.against:
            played["random"] = play_games(self.model, self.game, self.n_games, "random", self.deterministic)
        if "previous" in self.against and self._previous is not None:
            played["previous"] = play_games(self.model, self.game, self.n_games, PolicyPlayer(self._previous), False)
        if "previous" in self.against:
            self._previous = copy.deepcopy(self.model.policy)
        self.history.append((self.num_timesteps, played))
        for name, results in played.items():
            for key, value in results.as_dict().items():
                self.logger.record(f"eval/{name}/{key}", value)
            if self.verbose:
                print(f"Eval num_timesteps={self.num_timesteps}, against {name}: {results}")
        continue_training = True
        if "random" in played:
            win, _, loss = played["random"].rates()
            self.last_mean_reward = win - loss
            if self.last_mean_reward > self.best_mean_reward:
                self.best_mean_reward = self.last_mean_reward
                if self.best_model_save_path is not None:
                    self.model.save(os.path.join(self.best_model_save_path, "best_model"))
                if self.callback_on_new_best is not None:
                    continue_training = self.callback_on_new_best.on_step()
        self.logger.dump(self.num_timesteps)
        return continue_training
