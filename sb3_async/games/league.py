"""A league of past selves at a turn-based game's other seats (``opponent="league"`` or an :class:`OpponentPool`).

Self-play against the latest policy alone narrows to a few lines of play, and the learner forgets how to beat the
others; AlphaStar's league (Vinyals et al. 2019) and OpenAI Five (Berner et al. 2019, 20% of its games against past
versions) let past versions of the policy play too. Here each worker keeps a league of its own:

- every ``snapshot_interval`` updates of the policy the worker plays with (a gradient-sharing worker's own updates;
  an Ape-X actor's, the learner's updates that reached its parameters), at the next start of one of its games, it
  copies that policy θ' into a snapshot; it keeps the last ``size`` (the oldest dropped first);
- at each episode start, each of its games draws the policy that plays its other seats: the latest one (θ' itself,
  with the game's self-play ε, :func:`~sb3_async.games.players.self_play_epsilons`) with weight ``latest``, a snapshot
  drawn uniformly with weight ``uniform``, or a snapshot drawn by prioritized fictitious self-play with weight
  ``prioritized`` (:func:`opponent_probabilities`). Snapshots play their own moves, without ε.

Each finished game's ``info["game"]`` names its opponent and carries the snapshots the worker took or dropped to the
main process, where :class:`~sb3_async.common.league_record.LeagueRecord` (``model.league``) rates every snapshot
(Elo), logs the ``games/`` keys and is saved with the model; the next ``learn()`` call, also after ``load()``, starts
each worker's league from the snapshots the record keeps. :func:`league_table` plays the model against each of them.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from stable_baselines3.common.vec_env import VecEnv

from sb3_async.common.league_record import (
    ELO_INITIAL,
    ELO_K,
    LeagueRecord,
    LeagueSeed,
    SnapshotState,
    elo_expected,
    elo_update,
)
from sb3_async.env_pool.turns import TurnBasedGame
from sb3_async.games.evaluation import GameResults, play_games
from sb3_async.games.players import PolicyPlayer, attach_self_play, self_play_epsilons
from sb3_async.validation import check_float, check_int

__all__ = [
    "ELO_INITIAL",
    "ELO_K",
    "League",
    "LeaguePlayer",
    "LeagueRecord",
    "OpponentPool",
    "attach_opponents",
    "elo_expected",
    "elo_update",
    "league_table",
    "opponent_probabilities",
    "snapshot_score",
]


@dataclass(frozen=True)
class OpponentPool:
    """A league of past selves as a :class:`~sb3_async.env_pool.turns.TurnBasedGame`'s ``opponent``;
    ``opponent="league"`` is ``OpponentPool()``.

    :param snapshot_interval: updates of the worker's policy between two snapshots
    :param size: snapshots each worker keeps (the oldest dropped first)
    :param latest: weight of the latest policy (self-play) in each episode's draw
    :param uniform: weight of a snapshot drawn uniformly
    :param prioritized: weight of a snapshot drawn in proportion to its score against the learner
        (:func:`snapshot_score`, prioritized fictitious self-play)

    The default mix, half the games against the latest policy and half against snapshots drawn by their score,
    follows AlphaStar's main agents (35% self-play, 50% prioritized fictitious self-play against past players and 15%
    against those the main agents lose to; Vinyals et al. 2019, Methods, "League composition"), with self-play's share
    raised to a half, as this league has no exploiters.
    """

    snapshot_interval: int = 1000
    size: int = 20
    latest: float = 0.5
    uniform: float = 0.0
    prioritized: float = 0.5

    #: How :class:`~sb3_async.env_pool.turns.TurnBasedGame` tells a league among its opponents (it imports no torch)
    is_league: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_int("snapshot_interval", self.snapshot_interval)
        check_int("size", self.size)
        for name in ("latest", "uniform", "prioritized"):
            check_float(name, getattr(self, name), low=0.0)
        if self.latest + self.uniform + self.prioritized <= 0:
            raise ValueError("Invalid OpponentPool: latest + uniform + prioritized must be positive")

    @staticmethod
    def of(opponent: Any) -> OpponentPool | None:
        """The pool a game's ``opponent`` names (``"league"``: the default one), None for any other opponent."""
        if isinstance(opponent, OpponentPool):
            return opponent
        return OpponentPool() if isinstance(opponent, str) and opponent == "league" else None


def snapshot_score(results: Sequence[int]) -> float:
    """A snapshot's score against the learner from the learner's ``[wins, draws, losses]`` against it: the snapshot's
    wins plus half its draws, with one won and one lost game added (a new snapshot scores 0.5)."""
    wins, draws, losses = results
    return (losses + 0.5 * draws + 1.0) / (wins + draws + losses + 2.0)


def opponent_probabilities(pool: OpponentPool, results: Sequence[Sequence[int]]) -> np.ndarray:
    """The probability of each opponent of one episode: ``[latest, snapshot 1, ..., snapshot n]``, the snapshots
    given by the learner's ``[wins, draws, losses]`` against each. With weights normalized to sum 1, the latest policy
    has ``latest``, each snapshot ``uniform / n`` plus ``prioritized * score / sum(scores)``
    (:func:`snapshot_score`); without snapshots the latest policy plays every game."""
    n = len(results)
    if n == 0:
        return np.ones(1)
    total = pool.latest + pool.uniform + pool.prioritized
    scores = np.array([snapshot_score(counts) for counts in results])
    snapshots = pool.uniform / n + pool.prioritized * scores / scores.sum()
    return np.concatenate([[pool.latest], snapshots]) / total


@dataclass(eq=False)
class _Snapshot:
    state: SnapshotState
    player: PolicyPlayer


class League:
    """One worker's league (see the module's notes): its snapshots, drawn as the opponent at each episode start.

    :param pool: the league's settings
    :param policy: the worker's policy θ' (the latest one; snapshots are copies of it)
    :param rank: the worker's rank (the second part of its snapshots' names)
    :param n_workers: how many workers share out ``start``'s snapshots (worker ``rank`` takes every ``n_workers``-th
        from the ``rank``-th on, and keeps the last ``size`` of them)
    :param updates: the worker's update count so far
    :param seed: seeds the draws and the snapshots' sampled moves
    :param start: the snapshots of earlier ``learn()`` calls and this call's generation (first part of the names)
    """

    def __init__(
        self,
        pool: OpponentPool,
        policy: Any,
        rank: int = 0,
        updates: Callable[[], int] | None = None,
        seed: int | None = None,
        start: LeagueSeed | None = None,
        n_workers: int = 1,
    ):
        self.pool, self.policy, self.rank = pool, policy, rank
        # copied before training: a worker's θ' in training can hold tensors that are not graph leaves
        self._template = copy.deepcopy(policy)
        self._updates = updates if updates is not None else (lambda: 0)
        self._rng = np.random.default_rng(seed)
        self._seed = seed
        self.generation = 0 if start is None else start.generation
        self.snapshots: deque[_Snapshot] = deque()
        self._taken = 0
        self._next: int | None = None  # the update count of the next snapshot (set at the first episode start)
        self._announce: deque[SnapshotState] = deque()  # taken, not yet sent to the main process
        self._dropped: list[str] = []
        for state in [] if start is None else start.snapshots[rank::n_workers]:  # each kept snapshot in one worker
            self._keep(SnapshotState(state.name, state.updates, state.state, list(state.results)), announce=False)

    def _player(self, state: dict[str, np.ndarray]) -> PolicyPlayer:
        policy = copy.deepcopy(self._template)
        policy.load_state_dict({key: torch.as_tensor(value) for key, value in state.items()})
        seed = None if self._seed is None else self._seed * 7919 + self._taken + len(self.snapshots)
        return PolicyPlayer(policy, seed=seed)

    def _keep(self, state: SnapshotState, announce: bool) -> None:
        self.snapshots.append(_Snapshot(state, self._player(state.state)))
        if announce:
            self._announce.append(state)
        while len(self.snapshots) > self.pool.size:
            oldest = self.snapshots.popleft().state
            unsent = [state for state in self._announce if state is not oldest]
            if len(unsent) < len(self._announce):  # never sent: nothing to drop on the other side
                self._announce = deque(unsent)
            else:
                self._dropped.append(oldest.name)

    def maybe_snapshot(self) -> bool:
        """Take a snapshot of the policy if ``snapshot_interval`` updates passed since the last one (or since the
        first call); returns whether it took one."""
        updates = int(self._updates())
        if self._next is None:
            self._next = updates + self.pool.snapshot_interval
        if updates < self._next:
            return False
        while self._next <= updates:
            self._next += self.pool.snapshot_interval
        state = {key: value.detach().cpu().numpy().copy() for key, value in self.policy.state_dict().items()}
        self._keep(SnapshotState(f"{self.generation}.{self.rank}.{self._taken}", updates, state), announce=True)
        self._taken += 1
        return True

    def draw(self) -> _Snapshot | None:
        """The opponent of an episode: a snapshot, or None for the latest policy (:func:`opponent_probabilities`)."""
        p = opponent_probabilities(self.pool, [snapshot.state.results for snapshot in self.snapshots])
        index = int(self._rng.choice(len(p), p=p))
        return None if index == 0 else self.snapshots[index - 1]

    def record(self, snapshot: _Snapshot | None, result: int) -> dict[str, Any]:
        """Count a finished game's ``result`` (the learner's: 1, 0, -1) against its opponent; returns what the game's
        ``info["game"]`` carries to the main process: the opponent's name, a snapshot taken since, those dropped."""
        if snapshot is not None and any(kept is snapshot for kept in self.snapshots):
            snapshot.state.results[1 - result] += 1
        extra: dict[str, Any] = {"opponent": "latest" if snapshot is None else snapshot.state.name}
        if self._announce:
            state = self._announce.popleft()
            extra["snapshot"] = {"name": state.name, "updates": state.updates, "state": state.state}
        if self._dropped:
            extra["dropped"], self._dropped = self._dropped, []
        return extra


class LeaguePlayer:
    """Plays a game's other seats for its worker's :class:`League`: at each episode start
    (:meth:`~sb3_async.env_pool.turns.TurnBasedGame.reset` calls :meth:`start_game`) the league draws the opponent,
    the latest policy playing with the game's ε (``latest``)."""

    def __init__(self, league: League, latest: PolicyPlayer):
        self.league, self.latest = league, latest
        self.opponent: _Snapshot | None = None

    def start_game(self) -> None:
        self.league.maybe_snapshot()
        self.opponent = self.league.draw()

    def __call__(self, observation: Any, action_mask: np.ndarray) -> int:
        return (self.latest if self.opponent is None else self.opponent.player)(observation, action_mask)

    def end_game(self, result: int) -> dict[str, Any]:
        return self.league.record(self.opponent, result)


def attach_opponents(
    env: VecEnv,
    policy: Any,
    seed: int | None = None,
    *,
    rank: int = 0,
    n_workers: int = 1,
    updates: Callable[[], int] | None = None,
    league: LeagueSeed | None = None,
) -> int:
    """Seat the players of a worker's turn-based games (its env copies ``env``, its policy θ' ``policy``): θ' at the
    other seats of ``"self"`` games (:func:`~sb3_async.games.players.attach_self_play`), and one :class:`League` over
    θ' for the worker's ``"league"`` games. Returns how many games it joined.

    :param rank: the worker's rank, and ``n_workers`` how many there are
    :param updates: the worker's update count (the league's snapshot clock)
    :param league: what the worker's league starts from (the model's record, ``model.league``)
    """
    joined = attach_self_play(env, policy, seed)
    games = [inner.unwrapped for inner in getattr(env.unwrapped, "envs", [])]
    pools = [(game, OpponentPool.of(game.opponent)) for game in games if isinstance(game, TurnBasedGame)]
    leagued = [(game, pool) for game, pool in pools if pool is not None]
    if not leagued:
        return joined
    pool = leagued[0][1]
    if any(other != pool for _, other in leagued):
        raise ValueError(f"The games of one worker have different opponent pools: {sorted({str(p) for _, p in leagued})}")
    shared = League(pool, policy, rank=rank, updates=updates, seed=seed, start=league, n_workers=n_workers)
    for index, ((game, _), epsilon) in enumerate(zip(leagued, self_play_epsilons(len(leagued), seed))):
        latest = PolicyPlayer(policy, epsilon=float(epsilon), seed=None if seed is None else seed * 1013 + index)
        game.attach_player(LeaguePlayer(shared, latest))
    return joined + len(leagued)


def league_table(
    model: Any,
    game: Callable[[], Any],
    n_games: int = 20,
    deterministic: bool = False,
    seed: int | None = None,
) -> dict[str, GameResults]:
    """The final policy against every snapshot the model's league keeps: for each (oldest first) its
    :class:`~sb3_async.games.GameResults` over ``n_games`` (seats alternating), the snapshot sampling its moves as it
    did in training. Print one line per snapshot with ``model.league.ratings[name]``, its Elo rating.

    :param model: a model that trained against a league (``model.league``)
    :param game: a factory of the PettingZoo AEC env, e.g. ``connect_four_v3.env``
    :param deterministic: ``predict``'s ``deterministic`` for the model (a Q-network policy takes its best move
        either way, and the games of two such players repeat)
    """
    record: LeagueRecord | None = getattr(model, "league", None)
    if record is None:
        raise ValueError("This model has no league: it never trained against opponent='league'")
    table: dict[str, GameResults] = {}
    for index, (name, snapshot) in enumerate(record.snapshots.items()):
        policy = copy.deepcopy(model.policy)
        policy.load_state_dict({key: torch.as_tensor(value) for key, value in snapshot.state.items()})
        player = PolicyPlayer(policy, seed=None if seed is None else seed + index)
        table[name] = play_games(model, game, n_games, player, deterministic, None if seed is None else seed + index)
    return table
