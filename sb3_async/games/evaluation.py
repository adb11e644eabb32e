"""A model judged by the games it wins: :func:`play_games` plays it against an opponent, the seats alternating, and
counts wins, draws and losses per seat (:class:`GameResults`); :class:`GameEvalCallback` does it during ``learn()``,
against a random legal player and against a frozen copy of the model from the previous evaluation, and logs the rates.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import EvalCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from sb3_async.env_pool.turns import OPPONENTS, Player, TurnBasedGame
from sb3_async.games.players import ModelPlayer, PolicyPlayer
from sb3_async.validation import check_int

__all__ = ["GameEvalCallback", "GameResults", "play_games"]


@dataclass
class GameResults:
    """Wins, draws and losses of one player per seat over a match (``results[seat] = [wins, draws, losses]``), and
    the player's return in each game (``rewards[seat]``: the game's reward, e.g. chips won in poker)."""

    seats: list[str]
    results: dict[int, list[int]] = field(default_factory=dict)
    rewards: dict[int, list[float]] = field(default_factory=dict)

    def add(self, seat: int, result: int, reward: float | None = None) -> None:
        self.results.setdefault(seat, [0, 0, 0])[1 - result] += 1
        if reward is not None:
            self.rewards.setdefault(seat, []).append(float(reward))

    def _returns(self, seat: int | None) -> np.ndarray:
        return np.array([r for s, rewards in self.rewards.items() if seat is None or s == seat for r in rewards])

    def mean_reward(self, seat: int | None = None) -> float:
        """The player's mean return per game, over every game (``seat=None``) or the games of one seat (NaN if none
        was recorded)."""
        returns = self._returns(seat)
        return float(returns.mean()) if returns.size else float("nan")

    def reward_standard_error(self, seat: int | None = None) -> float:
        """The standard error of :meth:`mean_reward`: the returns' sample standard deviation over the root of their
        number (NaN for fewer than 2 games)."""
        returns = self._returns(seat)
        return float(returns.std(ddof=1) / np.sqrt(returns.size)) if returns.size > 1 else float("nan")

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
            if self.rewards:
                out[f"{prefix}{label}mean_reward"] = self.mean_reward(seat)
        return out

    def __str__(self) -> str:
        parts = [f"{self.games} games: win {self.rates()[0]:.3f}, draw {self.rates()[1]:.3f}, loss {self.rates()[2]:.3f}"]
        for seat in sorted(self.results):
            win, draw, loss = self.rates(seat)
            parts.append(f"seat {seat} ({self.seats[seat]}): {win:.3f} / {draw:.3f} / {loss:.3f}")
        if self.rewards:
            parts.append(f"mean reward {self.mean_reward():.3f} +/- {self.reward_standard_error():.3f}")
        return "; ".join(parts)


def _as_player(opponent: Any, deterministic: bool) -> str | Player:
    if isinstance(opponent, str):
        if opponent not in OPPONENTS or opponent in ("self", "league"):
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
    the moves from ``model.predict(obs, action_masks=mask)``: never an illegal one. A game that ends before the model's
    first move (the opponent folds) counts as one of them. The results hold each game's return too (its rewards to the
    model's seat: chips in poker, +1 / 0 / -1 in the board games).

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
        quota, played = n_games // len(seats) + (seat < n_games % len(seats)), 0
        while played < quota:
            observation, _ = env.reset(seed=int(rng.integers(2**31)))
            done, info, reward = False, dict[str, Any](), 0.0
            while not done:
                action, _ = model.predict(observation, action_masks=env.action_masks(), deterministic=deterministic)
                observation, step_reward, terminated, truncated, info = env.step(int(np.asarray(action).reshape(-1)[0]))
                reward += float(step_reward)
                done = terminated or truncated
            # the games that ended before the model's first move count too (the opponent folded, resigned...)
            ended_at_reset = [(game_info, game_info["r"]) for game_info in info["game"].get("ended_at_reset", ())]
            for game_info, game_reward in [*ended_at_reset, (info["game"], reward)][: quota - played]:
                results.add(seat, game_info["result"], game_reward)
                played += 1
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
