"""The main process's record of a league of past selves (:mod:`sb3_async.games.league`): the snapshots the workers
took, every rated game's result and the Elo ratings, saved with the model.

Workers play the league; this module only keeps its record. Each finished game against the league reaches the main
process in its episode's ``info["game"]`` (``"opponent"``: ``"latest"`` or a snapshot's name; ``"snapshot"``: a
snapshot the worker took since its last finished game, with its parameters; ``"dropped"``: the snapshots it let go).
:class:`LeagueRecord` turns that stream into Elo ratings (:func:`elo_update`, pure), keeps the snapshots the workers
still hold, logs ``games/`` keys, and hands the kept snapshots back to the workers of the next ``learn()`` call
(:meth:`LeagueRecord.seed`). It imports no torch: snapshots are dicts of NumPy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ELO_INITIAL", "ELO_K", "LeagueRecord", "LeagueSeed", "SnapshotState", "elo_expected", "elo_update"]

#: Every rating starts here: the learner's first, and a snapshot's when its games arrive before the snapshot does.
ELO_INITIAL = 1000.0
#: Elo's K: the most one game moves a rating (32, the usual value for players with few games).
ELO_K = 32.0


def elo_expected(rating_a: float, rating_b: float) -> float:
    """The expected score of player A against player B: ``1 / (1 + 10^((R_B - R_A) / 400))``."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))


def elo_update(rating_a: float, rating_b: float, score_a: float, k: float = ELO_K) -> tuple[float, float]:
    """Both ratings after one game that A scored ``score_a`` in (1 a win, 0.5 a draw, 0 a loss):
    ``R_A + K (S_A - E_A)`` and ``R_B - K (S_A - E_A)`` (the points A gains, B loses)."""
    if not 0.0 <= score_a <= 1.0:
        raise ValueError(f"Invalid score_a={score_a}: a score in [0, 1] (1 win, 0.5 draw, 0 loss)")
    delta = k * (score_a - elo_expected(rating_a, rating_b))
    return rating_a + delta, rating_b - delta


@dataclass(eq=False)
class SnapshotState:
    """One snapshot of the learning policy: its name (``"<learn call>.<worker>.<index>"``), the worker's update count
    when it was taken, its parameters (the policy's ``state_dict`` as NumPy arrays) and the learner's results against
    it (``[wins, draws, losses]``, the learner's)."""

    name: str
    updates: int
    state: dict[str, np.ndarray]
    results: list[int] = field(default_factory=lambda: [0, 0, 0])


@dataclass
class LeagueSeed:
    """What a worker's league starts from: ``generation`` (the learn call, first part of its snapshots' names) and the
    snapshots kept by earlier calls, with the learner's results against them."""

    generation: int
    snapshots: list[SnapshotState]


class LeagueRecord:
    """The league's record in the main process (see the module's notes); ``model.league`` of a model that trained
    against ``opponent="league"``."""

    def __init__(self) -> None:
        #: Kept snapshots by name, oldest first: those a worker still holds
        self.snapshots: dict[str, SnapshotState] = {}
        #: The Elo rating of every snapshot that played (dropped ones too) and of the learner (``"latest"``)
        self.ratings: dict[str, float] = {"latest": ELO_INITIAL}
        #: Games of each opponent (``"latest"`` included) and the learner's results against it: ``[wins, draws, losses]``
        self.results: dict[str, list[int]] = {}
        self._generations = 0
        self._window: list[tuple[str, int]] = []  # the games since the last log: (opponent, learner's result)

    @property
    def learner_rating(self) -> float:
        return self.ratings["latest"]

    def add_game(self, game: dict[str, Any]) -> None:
        """Take one finished game's ``info["game"]``: a new snapshot, dropped ones, and the game's result (a game
        against a snapshot moves its rating and the learner's)."""
        snapshot = game.get("snapshot")
        if snapshot is not None:
            name = snapshot["name"]
            self._generations = max(self._generations, int(name.split(".")[0]) + 1)
            self.ratings.setdefault(name, self.learner_rating)
            kept = self.snapshots.get(name)
            self.snapshots[name] = SnapshotState(
                name, int(snapshot["updates"]), snapshot["state"], kept.results if kept else [0, 0, 0]
            )
        for name in game.get("dropped", ()):
            self.snapshots.pop(name, None)
        opponent, result = game["opponent"], int(game["result"])
        self.results.setdefault(opponent, [0, 0, 0])[1 - result] += 1
        self._window.append((opponent, result))
        if opponent == "latest":
            return
        rating = self.ratings.setdefault(opponent, ELO_INITIAL)
        self.ratings["latest"], self.ratings[opponent] = elo_update(self.learner_rating, rating, (1 + result) / 2)
        if opponent in self.snapshots:
            self.snapshots[opponent].results[1 - result] += 1

    def seed(self) -> LeagueSeed:
        """What the workers of the next ``learn()`` call start from: the kept snapshots and a new generation."""
        return LeagueSeed(self._generations, list(self.snapshots.values()))

    def record(self, logger: Any) -> None:
        """Log the ``games/`` keys: the learner's rating, each kept snapshot's (``games/elo/<name>``), how many are
        kept, and, over the games since the last log, the share played against the latest policy and the learner's
        win and loss rates against the snapshots."""
        logger.record("games/elo/latest", self.learner_rating)
        for name in self.snapshots:
            logger.record(f"games/elo/{name}", self.ratings.get(name, ELO_INITIAL))
        logger.record("games/snapshots", len(self.snapshots))
        if self._window:
            against = np.array([opponent != "latest" for opponent, _ in self._window])
            results = np.array([result for _, result in self._window])
            logger.record("games/vs_latest_share", float(np.mean(~against)))
            if against.any():
                logger.record("games/vs_snapshots_win_rate", float(np.mean(results[against] == 1)))
                logger.record("games/vs_snapshots_loss_rate", float(np.mean(results[against] == -1)))
        self._window = []

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_window": []}
