"""Every game of ``pettingzoo.classic`` (PettingZoo 1.27) in the pool and under the algorithms, through a checker that
raises on a masked move (any seat's: the learner's, self-play's and the random opponent's): no illegal move, no episode
that starts finished (a fold or a resignation before the learner's first move is played inside reset() and counted),
games of more than two seats, and a truncation where the learner has no legal move ending as terminated."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import AECEnv
from pettingzoo.classic import (
    chess_v6,
    connect_four_v3,
    go_v5,
    hanabi_v5,
    leduc_holdem_v4,
    rps_v2,
    texas_holdem_no_limit_v6,
    texas_holdem_v4,
    tictactoe_v3,
)
from pettingzoo.utils import BaseWrapper

import sb3_async
from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.turns import TurnBasedGame
from sb3_async.games import ModelPlayer, play_games

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class IllegalMove(AssertionError):
    pass


class Checked(BaseWrapper):
    """A PettingZoo AEC env that raises :class:`IllegalMove` on a masked move of any seat, and counts the moves it
    checked (per process: the serial backend's workers and a pool with ``n_hosts=0`` step it in the test's process)."""

    moves = 0

    def step(self, action: Any) -> None:
        agent = self.env.agent_selection
        if not (self.env.terminations[agent] or self.env.truncations[agent]):
            if action is None:
                raise IllegalMove(f"{agent} stepped None in a live turn")
            observation = self.env.observe(agent)
            mask = observation.get("action_mask") if isinstance(observation, dict) else None
            if mask is None:
                mask = self.env.infos[agent].get("action_mask")
            if mask is not None and not mask[int(action)]:
                raise IllegalMove(f"{agent} played the masked move {action} (legal: {np.flatnonzero(mask).tolist()})")
            Checked.moves += 1
        super().step(action)


#: Every classic game, as built for the tests (go on a 9x9 board: 19x19 in the slow test).
GAMES: dict[str, Callable[[], Any]] = {
    "tictactoe_v3": tictactoe_v3.env,
    "connect_four_v3": connect_four_v3.env,
    "rps_v2": rps_v2.env,
    "leduc_holdem_v4": leduc_holdem_v4.env,
    "texas_holdem_v4": texas_holdem_v4.env,
    "texas_holdem_no_limit_v6": texas_holdem_no_limit_v6.env,
    "hanabi_v5": hanabi_v5.env,
    "go_v5": lambda: go_v5.env(board_size=9),
    "chess_v6": chess_v6.env,
}
#: Games whose steps are slow enough (long games, large observations) to train for fewer steps.
LONG = {"go_v5", "chess_v6"}
#: Games whose episodes may end before the learner's first move (a fold).
FOLDS = {"leduc_holdem_v4", "texas_holdem_v4", "texas_holdem_no_limit_v6"}


def checked(name: str) -> Callable[[], Checked]:
    make = GAMES[name]
    return lambda: Checked(make())


def random_legal(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(mask)) for mask in masks])


@pytest.mark.parametrize("name", list(GAMES))
def test_the_pool_steps_every_classic_game_with_legal_moves_only(name: str) -> None:
    """4 copies with random legal moves: every observation the pool hands out has a legal move (a game that ended
    before the learner's first move is never one), and each episode's end says its seat and result."""
    Checked.moves = 0
    steps = 60 if name in LONG else 150
    with AsyncEnvPool(checked(name), n_envs=4, n_hosts=0) as pool:
        venv = pool.as_vec_env()
        venv.seed(0)
        venv.reset()
        rng, ends, games = np.random.default_rng(0), 0, 0
        turn_based = name != "rps_v2"  # rock-paper-scissors moves at once: two slots per copy, no masks
        for _ in range(steps):
            if turn_based:
                masks = np.stack(venv.env_method("action_masks"))
                assert masks.any(axis=1).all(), "an observation without a legal move"
                actions = random_legal(masks, rng)
            else:
                actions = np.array([venv.action_space.sample() for _ in range(venv.num_envs)])
            _, _, dones, infos = venv.step(actions)
            ends += int(dones.sum())
            for info, done in zip(infos, dones, strict=True):
                if done and turn_based:
                    games += 1 + len(info["game"].get("ended_at_reset", ()))
                    assert info["game"]["result"] in (-1, 0, 1)
        assert venv.num_envs == (8 if name == "rps_v2" else 4)
        assert Checked.moves >= steps * 4
        if name not in LONG:
            assert ends > 0 and (games >= ends or not turn_based)


def _algorithm_kwargs(algo: str) -> dict[str, Any]:
    if algo == "ApeXDQN":
        return dict(n_actors=2, n_envs_per_actor=2, learning_starts=100, batch_size=32, buffer_size=5_000)
    return dict(n_workers=2, n_envs_per_worker=2)


#: Ape-X DQN in the default run on the games where its path differs (folds before the first move, Hanabi's ends),
#: in the slow run on the others (its learner's batches take a few seconds more per game).
APEX_FAST = ("leduc_holdem_v4", "hanabi_v5")
TRAINING = [
    *((algo, name) for algo in ("A3C", "AsyncNStepQ") for name in GAMES),
    *(("ApeXDQN", name) if name in APEX_FAST else pytest.param("ApeXDQN", name, marks=pytest.mark.slow) for name in GAMES),
]


@pytest.mark.parametrize("algo,name", TRAINING)
def test_every_classic_game_trains_without_an_illegal_move(algo: str, name: str) -> None:
    """A few hundred steps of self-play (the workers' policies at the other seats) with the serial backend: the
    checker saw every move and none was masked; the games that ended before the learner's first move are counted in
    the episodes that learn() logs, as episodes of no step."""
    Checked.moves = 0
    steps = 200 if name in LONG else 600
    model = getattr(sb3_async, algo)("MlpPolicy", checked(name), seed=0, backend="serial", **_algorithm_kwargs(algo))
    model.learn(steps)
    assert model.num_timesteps >= steps and Checked.moves >= steps
    if name in LONG:
        return
    episodes = list(model.ep_info_buffer)
    assert episodes
    if name != "rps_v2":
        assert all("seat" in episode for episode in episodes)
    if name == "leduc_holdem_v4":  # the other seat folds first in some games: counted, with no step of the learner
        folded = [episode for episode in episodes if episode["l"] == 0]
        assert folded and all(episode["result"] == 1 and episode["r"] > 0 for episode in folded)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,make",
    [("go_v5", lambda: go_v5.env(board_size=19)), ("chess_v6", chess_v6.env), ("go_v5_9x9", lambda: go_v5.env(board_size=9))],
)
def test_long_games_train_longer_without_an_illegal_move(name: str, make: Callable[[], Any]) -> None:
    for algo in ("A3C", "AsyncNStepQ", "ApeXDQN"):
        model = getattr(sb3_async, algo)("MlpPolicy", lambda: Checked(make()), seed=0, **_algorithm_kwargs(algo))
        model.learn(2_000)
        assert model.num_timesteps >= 2_000


def test_an_mp_run_on_a_folding_game_takes_no_illegal_move() -> None:
    """The workers in their own processes, texas hold'em's folds included (a masked move would fail learn())."""
    model = sb3_async.AsyncNStepQ("MlpPolicy", checked("texas_holdem_v4"), n_workers=2, n_envs_per_worker=2, seed=0)
    model.learn(500)
    assert model.num_timesteps >= 500
    assert any(episode["l"] == 0 for episode in model.ep_info_buffer)  # games folded before the learner's move
    results = play_games(model, checked("texas_holdem_v4"), 10, seed=0)
    assert results.games == 10


class FoldFirst:
    """Folds whenever it may (leduc's action 2), else calls or checks."""

    def __call__(self, observation: Any, action_mask: np.ndarray) -> int:
        for move in (2, 3, 0):
            if action_mask[move]:
                return move
        raise AssertionError(f"no fold, check or call in {action_mask}")


def test_a_game_the_opponent_ends_before_the_learners_move_is_counted_not_returned() -> None:
    # Seat 1 against an opponent that folds at once: in every game where the opponent acts first it folds, so reset()
    # plays those games to their end and returns only a game the learner moves in, which then ends at its first move
    # (the opponent folds on its turn).
    game = TurnBasedGame(leduc_holdem_v4.env(), opponent=FoldFirst(), seat=1)
    folded_before = []
    for episode in range(30):
        game.reset(seed=episode)
        assert game.action_masks().any() and not game.env.terminations[game.learner]
        _, reward, terminated, truncated, info = game.step(3 if game.action_masks()[3] else 0)  # check, or call
        assert terminated and reward > 0 and info["game"]["result"] == 1  # the opponent folded on its first turn
        folded_before += info["game"].get("ended_at_reset", [])
    assert folded_before, "no game started with the opponent's fold"
    for ended in folded_before:
        assert ended == {"seat": 1, "agent": "player_1", "result": 1, "r": ended["r"]} and ended["r"] > 0

    # play_games counts those games among its n_games
    model = sb3_async.AsyncNStepQ("MlpPolicy", leduc_holdem_v4.env, n_workers=1, seed=0)
    results = play_games(model, leduc_holdem_v4.env, 40, opponent=FoldFirst(), seed=0)
    assert results.games == 40 and results.rates()[0] == 1.0  # every game won, folded before or after a move


class NeverYourTurn(AECEnv):
    """A two-seat game that seat 0 always ends at once: the learner at seat 1 never has a move."""

    metadata = {"name": "never_your_turn", "is_parallelizable": False}

    def __init__(self) -> None:
        self.possible_agents = ["first", "second"]

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Dict({"observation": spaces.Box(0, 1, (2,), np.float32), "action_mask": spaces.MultiBinary(2)})

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.agents = list(self.possible_agents)
        self.agent_selection = "first"
        self.rewards = {agent: 0.0 for agent in self.agents}
        self._cumulative_rewards = dict(self.rewards)
        self.terminations = {agent: False for agent in self.agents}
        self.truncations = dict(self.terminations)
        self.infos: dict[str, dict] = {agent: {} for agent in self.agents}

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        mine = agent == self.agent_selection and not self.terminations[agent]
        return {"observation": np.zeros(2, np.float32), "action_mask": np.array([mine, mine], dtype=np.int8)}

    def step(self, action: Any) -> None:
        if self.terminations[self.agent_selection]:
            self._was_dead_step(action)
            return
        self.rewards = {"first": 1.0, "second": -1.0}
        self.terminations = {agent: True for agent in self.agents}
        self._cumulative_rewards = dict(self.rewards)
        self.agent_selection = "second"


def test_a_game_the_learner_never_moves_in_is_refused_with_a_reason() -> None:
    game = TurnBasedGame(NeverYourTurn(), opponent="random", seat=1)
    with pytest.raises(RuntimeError, match="ended before the learner's first move"):
        game.reset(seed=0)


class Truncated(NeverYourTurn):
    """Seat 0 moves, then the game is cut short (truncated) with the learner to move and no legal move for it, as
    Hanabi's move limit leaves a seat whose turn it is not."""

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        if agent == "first":
            self.agent_selection = "second"
            return
        self.truncations = {agent: True for agent in self.agents}
        self.agent_selection = "first"

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        mine = agent == self.agent_selection and not (self.terminations[agent] or self.truncations[agent])
        return {"observation": np.zeros(2, np.float32), "action_mask": np.array([mine, mine], dtype=np.int8)}


def test_a_truncation_without_a_legal_move_ends_as_terminated() -> None:
    game = TurnBasedGame(Truncated(), opponent="random", seat=0)
    game.reset(seed=0)
    assert game.action_masks().all()
    _, _, terminated, truncated, info = game.step(0)  # seat 1 moves, then the cut: seat 0 has no legal move
    assert (terminated, truncated) == (True, False) and not game.action_masks().any()
    assert info["game"]["seat"] == 0


@pytest.mark.parametrize("players", [3, 5])
def test_hanabi_with_more_seats_every_other_seat_is_the_opponents_and_the_reward_the_learners(players: int) -> None:
    moved: list[str] = []

    class Recorder(BaseWrapper):
        """Each step's rewards of every seat, as the env gives them."""

        def __init__(self, env: Any):
            super().__init__(env)
            self.log: list[dict[str, float]] = []

        def step(self, action: Any) -> None:
            super().step(action)
            self.log.append(dict(self.env.rewards))

    def opponent(observation: Any, action_mask: np.ndarray) -> int:
        moved.append(env.agent_selection)
        return int(rng.choice(np.flatnonzero(action_mask)))

    env = Recorder(Checked(hanabi_v5.env(players=players)))
    rng = np.random.default_rng(0)
    game = TurnBasedGame(env, opponent=opponent)
    assert len(game.seats) == players
    seats = []
    for episode in range(2 * players):
        game.reset(seed=episode)
        env.log.clear()
        moved.clear()
        total, done, info = 0.0, False, {}
        while not done:
            _, reward, terminated, truncated, info = game.step(rng.choice(np.flatnonzero(game.action_masks())))
            total += reward
            done = terminated or truncated
        # the seats take turns game by game, games over before the learner's first move (3 lives lost) included
        seats += [ended["seat"] for ended in info["game"].get("ended_at_reset", ())] + [info["game"]["seat"]]
        assert game.learner not in moved and set(moved) <= set(game.seats)  # every other seat: the opponent's
        # the learner's return is its own reward, summed over every move of the game since its first one
        own = sum(rewards.get(game.learner, 0.0) for rewards in env.log)
        assert total == pytest.approx(own)
    assert seats == [k % players for k in range(len(seats))]


def test_an_opponent_model_that_does_not_exist_is_refused_at_construction(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="none.zip"):
        ModelPlayer(tmp_path / "none.zip", sb3_async.A3C)
    with pytest.raises(TypeError, match="model="):
        ModelPlayer(3, sb3_async.A3C)  # type: ignore[arg-type]
    model = sb3_async.A3C("MlpPolicy", tictactoe_v3.env, n_workers=1, seed=0)
    model.save(tmp_path / "saved")
    ModelPlayer(tmp_path / "saved", sb3_async.A3C)  # SB3's load adds ".zip"
    ModelPlayer(tmp_path / "saved.zip", sb3_async.A3C)


class BoxActions(NeverYourTurn):
    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize("n_hosts", [0, 1])
def test_a_game_the_pool_cannot_take_says_why(n_hosts: int) -> None:
    with pytest.raises(Exception, match="a turn-based game needs a Discrete action space") as raised:
        AsyncEnvPool(BoxActions, n_envs=2, n_hosts=n_hosts)
    assert "Discrete action space" in str(raised.value).splitlines()[0]  # said first, before any traceback
    with pytest.raises(ValueError, match="drop agent_id"):
        AsyncEnvPool(tictactoe_v3.env, n_envs=2, n_hosts=0, agent_id=True)
    # a game's env itself (not its factory) is copied to every slot, as a gymnasium env is
    with AsyncEnvPool(tictactoe_v3.env(), n_envs=2, n_hosts=n_hosts) as pool:
        assert pool.n_envs == 2
