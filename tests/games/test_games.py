"""Turn-based PettingZoo games: each seat's reward on its own last move (scripted games against hand-worked outcomes),
only the seat to move acts, seats that alternate, the pool and every discrete algorithm on a game that raises on an
illegal move (self-play: the workers' policies play the other seats), the evaluation helper and its callback, and the
errors for bad input."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env import DummyVecEnv

import sb3_async
from sb3_async.common.masks import masked_policy
from sb3_async.common.torch_utils import categorical_logits, sample_actions
from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.turns import TurnBasedGame, is_turn_based
from sb3_async.games import (
    GameEvalCallback,
    GameResults,
    ModelPlayer,
    PolicyPlayer,
    attach_self_play,
    play_games,
    self_play_epsilons,
)
from sb3_async.games.players import SELF_PLAY_EPSILONS

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("one_torch_thread")

DISCRETE = ("A3C", "AsyncOneStepQ", "AsyncSarsa", "AsyncNStepQ", "ApeXDQN")


def strict_tictactoe() -> Any:
    """tic-tac-toe whose illegal move raises (PettingZoo's raw env asserts) instead of ending the game with -1."""
    return tictactoe_v3.raw_env()


class DropoutFlatten(BaseFeaturesExtractor):
    """Flattened observations through a dropout layer: a network whose output depends on its training mode."""

    def __init__(self, observation_space: Any):
        super().__init__(observation_space, int(np.prod(observation_space.shape)))
        self.layers = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.9))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.layers(observations)


class Script:
    """A player that plays the given moves in order."""

    def __init__(self, moves: list[int]):
        self.moves: Iterator[int] = iter(moves)

    def __call__(self, observation: Any, action_mask: np.ndarray) -> int:
        move = next(self.moves)
        assert action_mask[move], f"scripted move {move} is illegal"
        return move


def play_script(game: TurnBasedGame, moves: list[int]) -> tuple[list[float], list[bool], dict[str, Any]]:
    rewards, ends, info = [], [], {}
    for move in moves:
        _, reward, terminated, truncated, info = game.step(move)
        rewards.append(reward)
        ends.append(terminated or truncated)
    return rewards, ends, info


def test_a_win_pays_the_winners_last_move_and_a_loss_the_losers_last_move() -> None:
    # Seat 0 completes the line 0-1-2 on its third move: +1 on that move, 0 before.
    game = TurnBasedGame(strict_tictactoe(), opponent=Script([3, 4]), seat=0)
    game.reset(seed=0)
    rewards, ends, info = play_script(game, [0, 1, 2])
    assert rewards == [0.0, 0.0, 1.0] and ends == [False, False, True]
    assert info["game"] == {"seat": 0, "agent": "player_1", "result": 1}

    # The opponent completes 3-4-5 right after seat 0's third move: the loss lands on that move, -1.
    game = TurnBasedGame(strict_tictactoe(), opponent=Script([3, 4, 5]), seat=0)
    game.reset(seed=0)
    rewards, ends, info = play_script(game, [0, 1, 8])
    assert rewards == [0.0, 0.0, -1.0] and ends == [False, False, True]
    assert info["game"]["result"] == -1

    # Seat 1: the opponent moves first at reset; seat 1 wins with 3-4-5 on its third move.
    game = TurnBasedGame(strict_tictactoe(), opponent=Script([0, 1, 8]), seat=1)
    observation, _ = game.reset(seed=0)
    assert game.learner == "player_2"
    assert observation.sum() == 1  # the opponent's first stone is on the board
    rewards, ends, info = play_script(game, [3, 4, 5])
    assert rewards == [0.0, 0.0, 1.0] and info["game"] == {"seat": 1, "agent": "player_2", "result": 1}


def test_a_draw_pays_nothing_and_the_mask_is_the_learners() -> None:
    # X: 0 2 3 7 8 (seat 0), O: 1 4 5 6: a full board without a line.
    game = TurnBasedGame(strict_tictactoe(), opponent=Script([1, 4, 5, 6]), seat=0)
    game.reset(seed=0)
    assert game.action_masks().all()
    _, reward, *_ = game.step(0)
    assert reward == 0.0
    assert not game.action_masks()[[0, 1]].any() and game.action_masks().sum() == 7  # 0 and the opponent's 1 taken
    rewards, ends, info = play_script(game, [2, 3, 7, 8])
    assert rewards == [0.0] * 4 and ends[-1] and info["game"]["result"] == 0


def test_seats_alternate_and_random_games_take_only_legal_moves() -> None:
    game = TurnBasedGame(strict_tictactoe(), opponent="random")
    rng = np.random.default_rng(0)
    seats, results = [], GameResults(game.seats)
    for episode in range(300):
        game.reset(seed=episode)
        done, info = False, {}
        while not done:  # the raw env raises on an illegal move, the opponent's included
            _, _, terminated, truncated, info = game.step(int(rng.choice(np.flatnonzero(game.action_masks()))))
            done = terminated or truncated
        seats.append(info["game"]["seat"])
        results.add(info["game"]["seat"], info["game"]["result"])
    assert seats == [0, 1] * 150
    # random against random: the first player wins more often than the second
    assert results.rates(0)[0] > results.rates(1)[0]
    assert results.games == 300 and sum(results.rates()) == pytest.approx(1.0)


def test_turn_based_games_are_recognised() -> None:
    assert is_turn_based(connect_four_v3.env()) and is_turn_based(tictactoe_v3.raw_env())
    game = TurnBasedGame(connect_four_v3.env())
    assert game.observation_space.shape == (6, 7, 2) and game.action_space.n == 7


@pytest.mark.parametrize("n_hosts", [0, 1])
def test_the_pool_steps_a_game_as_one_slot_per_copy(n_hosts: int) -> None:
    with AsyncEnvPool(strict_tictactoe, n_envs=3, n_hosts=n_hosts) as pool:
        venv = pool.as_vec_env()
        venv.reset()
        assert venv.num_envs == 3 and venv.observation_space.shape == (3, 3, 2)
        rng = np.random.default_rng(0)
        ends = 0
        for _ in range(60):
            masks = np.stack(venv.env_method("action_masks"))
            actions = np.array([rng.choice(np.flatnonzero(mask)) for mask in masks])
            _, _, dones, infos = venv.step(actions)
            ends += int(dones.sum())
            assert all("game" in info for info, done in zip(infos, dones, strict=True) if done)
        assert ends > 0


def test_bad_input_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="opponent="):
        TurnBasedGame(tictactoe_v3.env(), opponent="best")
    with pytest.raises(TypeError, match="opponent="):
        TurnBasedGame(tictactoe_v3.env(), opponent=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seat="):
        TurnBasedGame(tictactoe_v3.env(), seat=2)
    with pytest.raises(ValueError, match="seat="):
        TurnBasedGame(tictactoe_v3.env(), seat="player_9")
    with pytest.raises(ValueError, match="algorithm="):
        ModelPlayer("model.zip")
    with pytest.raises(ValueError, match="opponent="):
        play_games(None, tictactoe_v3.env, 2, opponent="self")
    with pytest.raises(ValueError, match="against="):
        GameEvalCallback(tictactoe_v3.env, against=("best",))
    with pytest.raises(ValueError, match="n_games"):
        play_games(None, tictactoe_v3.env, 0)
    with pytest.raises(ValueError, match="n_games"):
        GameEvalCallback(tictactoe_v3.env, n_games=0)


@pytest.mark.parametrize("algo", DISCRETE)
def test_every_discrete_algorithm_self_plays_without_an_illegal_move(algo: str) -> None:
    """3,000 steps on a game that raises on an illegal move: a finished run took none, at either seat (the
    other seats are played by the workers' own policies)."""
    kwargs: dict[str, Any] = dict(n_actors=1, learning_starts=200) if algo == "ApeXDQN" else dict(n_workers=2)
    model = getattr(sb3_async, algo)("MlpPolicy", strict_tictactoe, seed=0, **kwargs)
    model.learn(3_000)
    assert model.num_timesteps >= 3_000
    results = play_games(model, strict_tictactoe, 20, seed=0)
    assert results.games == 20 and set(results.results) == {0, 1}


def test_workers_attach_their_policy_to_self_play_games() -> None:
    model = sb3_async.AsyncNStepQ("MlpPolicy", strict_tictactoe, n_workers=1, seed=0)
    venv = DummyVecEnv([lambda: TurnBasedGame(strict_tictactoe()), lambda: TurnBasedGame(strict_tictactoe(), "random")])
    assert attach_self_play(venv, model.policy, seed=3) == 1  # the "random" game keeps its opponent
    player = venv.envs[0].unwrapped.player
    assert isinstance(player, PolicyPlayer) and player.policy is model.policy
    assert player.epsilon == self_play_epsilons(1, seed=3)[0]  # a lone game: its worker's own draw
    assert venv.envs[1].unwrapped.player is None
    a3c = sb3_async.A3C("MlpPolicy", strict_tictactoe, n_workers=1, seed=0)
    games = DummyVecEnv([lambda: TurnBasedGame(strict_tictactoe())] * 5)
    assert attach_self_play(games, a3c.policy, seed=3) == 5
    epsilons = [game.unwrapped.player.epsilon for game in games.envs]
    assert epsilons == [0.0, 0.25, 0.5, 0.75, 1.0]  # the policy alone ... a random player
    assert len({id(game.unwrapped.player._rng) for game in games.envs}) == 5


def test_self_play_epsilons_spread_over_the_range() -> None:
    low, high = SELF_PLAY_EPSILONS
    np.testing.assert_allclose(self_play_epsilons(3), [low, (low + high) / 2, high])
    draws = [self_play_epsilons(1, seed)[0] for seed in range(50)]
    assert all(low <= draw <= high for draw in draws) and len(set(draws)) == 50
    assert self_play_epsilons(1, seed=7)[0] == self_play_epsilons(1, seed=7)[0]


def test_policy_players_never_play_an_illegal_move() -> None:
    for algo in ("A3C", "AsyncNStepQ"):
        model = getattr(sb3_async, algo)("MlpPolicy", strict_tictactoe, n_workers=1, seed=0)
        for deterministic in (True, False):
            player = PolicyPlayer(model.policy, deterministic=deterministic)
            rng = np.random.default_rng(1)
            for _ in range(50):
                mask = rng.random(9) < 0.3
                mask[rng.integers(9)] = True
                assert mask[player(np.zeros((3, 3, 2), np.int8), mask)]


def test_a_policy_players_sampled_moves_follow_the_masked_distribution() -> None:
    model = sb3_async.A3C("MlpPolicy", strict_tictactoe, n_workers=1, seed=0)
    policy = model.policy
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 2, size=(6, 3, 3, 2)).astype(np.int8)
    masks = rng.random((6, 9)) < 0.5
    masks[np.arange(6), rng.integers(9, size=6)] = True
    obs_tensor, _ = policy.obs_to_tensor(obs)
    with torch.no_grad(), masked_policy(policy, masks):
        expected = policy.get_distribution(obs_tensor).distribution.probs
        features = policy.extract_features(obs_tensor, policy.pi_features_extractor)
        probs = torch.softmax(categorical_logits(policy, features, masks), dim=-1)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=1e-5)
    assert (probs[torch.as_tensor(~masks)] == 0).all()
    torch.manual_seed(0)
    for deterministic in (True, False):
        player = PolicyPlayer(policy, deterministic=deterministic)
        moves = np.array([player(obs[0], masks[0]) for _ in range(3000)])
        frequencies = np.bincount(moves, minlength=9) / len(moves)
        if deterministic:
            assert (moves == int(expected[0].argmax())).all()
        else:
            np.testing.assert_allclose(frequencies, expected[0].numpy(), atol=0.03)


def test_sampling_with_masks_refuses_a_policy_without_a_categorical_head() -> None:
    model = sb3_async.A3C("MlpPolicy", "Pendulum-v1", n_workers=1, seed=0)  # a Gaussian head
    with pytest.raises(ValueError, match="masks"):
        sample_actions(model.policy, np.zeros((1, 3), np.float32), masks=np.ones((1, 1), dtype=bool))


def test_a_policy_player_acts_in_eval_mode_where_the_mode_matters() -> None:
    model = sb3_async.A3C(
        "MlpPolicy", strict_tictactoe, n_workers=1, seed=0, policy_kwargs=dict(features_extractor_class=DropoutFlatten)
    )
    policy = model.policy
    policy.set_training_mode(True)  # dropout on: every forward pass differs
    obs, mask = np.ones((3, 3, 2), np.int8), np.ones(9, dtype=bool)
    policy.set_training_mode(False)
    best = int(policy.predict(obs, deterministic=True)[0])
    policy.set_training_mode(True)
    player = PolicyPlayer(policy, deterministic=True)
    assert [player(obs, mask) for _ in range(20)] == [best] * 20
    assert policy.training  # its mode is given back


def test_play_games_counts_results_per_seat_and_a_saved_model_plays(tmp_path: Any) -> None:
    model = sb3_async.AsyncNStepQ("MlpPolicy", strict_tictactoe, n_workers=1, seed=0)
    results = play_games(model, strict_tictactoe, 11, seed=0)
    assert results.games == 11 and sum(results.results[0]) == 6 and sum(results.results[1]) == 5
    path = tmp_path / "model.zip"
    model.save(path)
    saved = ModelPlayer(path, sb3_async.AsyncNStepQ)
    saved = cloudpickle.loads(cloudpickle.dumps(saved))  # pickles as a path: a pool's worker process can hold it
    mirror = play_games(model, strict_tictactoe, 10, opponent=saved, seed=0)
    # the same greedy policy at both seats, deterministic: one game per seat, played 5 times
    assert all(max(counts) == 5 for counts in mirror.results.values())
    with pytest.raises(TypeError, match="path"):
        cloudpickle.dumps(ModelPlayer(model))
    assert set(results.as_dict("x/")) >= {"x/win_rate", "x/seat_0_loss_rate", "x/seat_1_draw_rate"}


def test_the_games_callback_and_learn_log_rates_per_seat(tmp_path: Any) -> None:
    from stable_baselines3.common.logger import configure

    model = sb3_async.AsyncNStepQ("MlpPolicy", strict_tictactoe, n_workers=1, seed=0, backend="serial")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    callback = GameEvalCallback(strict_tictactoe, eval_freq=500, n_games=10, verbose=0)
    model.learn(1_600, callback=callback)
    assert len(callback.history) >= 2
    assert "previous" not in callback.history[0][1] and "previous" in callback.history[-1][1]
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"eval/random/win_rate", "eval/random/seat_1_loss_rate", "eval/previous/draw_rate"} <= set(header)
    # the training episodes per seat, from the workers' reports
    assert {"rollout/seat_0_win_rate", "rollout/seat_1_loss_rate", "rollout/seat_1_ep_rew_mean"} <= set(header)
    win, _, loss = callback.history[-1][1]["random"].rates()
    assert callback.last_mean_reward == pytest.approx(win - loss)


def test_seat_statistics_are_the_rates_of_each_seats_episodes() -> None:
    from sb3_async.common.async_algorithm import record_seat_statistics

    class Recorder:
        def __init__(self) -> None:
            self.values: dict[str, float] = {}

        def record(self, key: str, value: float) -> None:
            self.values[key] = value

    episodes = [
        {"r": 1.0, "l": 3, "seat": 0, "result": 1},
        {"r": -1.0, "l": 4, "seat": 1, "result": -1},
        {"r": 0.0, "l": 5, "seat": 0, "result": 0},
        {"r": 1.0, "l": 3, "seat": 0, "result": 1},
        {"r": 2.0, "l": 9},  # not a game's episode
    ]
    logger = Recorder()
    record_seat_statistics(logger, episodes)
    assert logger.values == {
        "rollout/seat_0_ep_rew_mean": pytest.approx(2 / 3),
        "rollout/seat_0_win_rate": pytest.approx(2 / 3),
        "rollout/seat_0_loss_rate": 0.0,
        "rollout/seat_1_ep_rew_mean": -1.0,
        "rollout/seat_1_win_rate": 0.0,
        "rollout/seat_1_loss_rate": 1.0,
    }


def test_game_results_hold_each_games_return_with_its_standard_error() -> None:
    results = GameResults(["player_0", "player_1"])
    for seat, result, reward in [(0, 1, 2.0), (0, -1, -1.0), (1, 0, 0.0), (1, 1, 3.0)]:
        results.add(seat, result, reward)
    assert results.mean_reward() == pytest.approx(1.0)
    # sample standard deviation of [2, -1, 0, 3]: sqrt(((1)^2 + (-2)^2 + (-1)^2 + 2^2) / 3) = sqrt(10 / 3)
    assert results.reward_standard_error() == pytest.approx(np.sqrt(10 / 3) / 2)
    assert results.mean_reward(seat=0) == pytest.approx(0.5)
    assert results.as_dict()["seat_1_mean_reward"] == pytest.approx(1.5)
    assert "mean reward 1.000 +/- 0.913" in str(results)


def test_play_games_records_the_chips_of_each_hand_folds_included() -> None:
    """Leduc hold'em against a random player: each hand's return has the sign of its result, and the hands the
    opponent folded before the model's first move count with their chips."""
    from pettingzoo.classic import leduc_holdem_v4

    model = sb3_async.A3C("MlpPolicy", lambda: TurnBasedGame(leduc_holdem_v4.env()), n_workers=1, seed=0)
    results = play_games(model, leduc_holdem_v4.env, 60, seed=0)
    assert results.games == 60 and sum(len(rewards) for rewards in results.rewards.values()) == 60
    for seat, rewards in results.rewards.items():
        wins, draws, losses = results.results[seat]
        assert sum(r > 0 for r in rewards) == wins and sum(r < 0 for r in rewards) == losses
        assert sum(r == 0 for r in rewards) == draws
    assert np.isfinite(results.reward_standard_error())
