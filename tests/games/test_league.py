"""A league of past selves (sb3_async.games.league): Elo updates against hand-computed values, the opponent mix and
its sampled frequencies, snapshots every N updates kept up to a size, A3C training against the league on both local
backends (games per opponent counted, ``games/`` keys logged), and the league kept through save and load."""

from __future__ import annotations

import sys
from typing import Any

import cloudpickle
import numpy as np
import pytest
import torch
from pettingzoo.classic import tictactoe_v3
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv

import sb3_async
from sb3_async.common.league_record import ELO_INITIAL, LeagueRecord, LeagueSeed, SnapshotState
from sb3_async.env_pool.turns import TurnBasedGame
from sb3_async.games import PolicyPlayer, attach_opponents, league_table, play_games
from sb3_async.games.league import (
    League,
    LeaguePlayer,
    OpponentPool,
    elo_expected,
    elo_update,
    opponent_probabilities,
    snapshot_score,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def strict_tictactoe() -> Any:
    """tic-tac-toe whose illegal move raises instead of ending the game."""
    return tictactoe_v3.raw_env()


def tictactoe_league(pool: OpponentPool | str = "league") -> Any:
    return lambda: TurnBasedGame(strict_tictactoe(), opponent=pool)


def small_policy() -> ActorCriticPolicy:
    game = TurnBasedGame(strict_tictactoe())
    return ActorCriticPolicy(game.observation_space, game.action_space, lambda _: 1e-3, net_arch=[8])


class Values(KVWriter):
    """Every logged dump, kept."""

    def __init__(self) -> None:
        self.dumps: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        self.dumps.append(dict(key_values))


# ----------------------------------------------------------------------------------------------------------- Elo
def test_elo_updates_match_hand_computed_values() -> None:
    assert elo_expected(1000, 1000) == pytest.approx(0.5)
    assert elo_expected(1200, 1000) == pytest.approx(1 / (1 + 10**-0.5))  # 0.759747
    assert elo_update(1000, 1000, 1.0) == pytest.approx((1016.0, 984.0))  # 32 * (1 - 0.5)
    # 1200 loses to 1000: 32 * (0 - 0.759747) = -24.3119
    assert elo_update(1200, 1000, 0.0) == pytest.approx((1175.6881, 1024.3119), abs=1e-4)
    # 1000 draws with 1400: E = 1/11, 32 * (0.5 - 0.090909) = 13.0909
    assert elo_update(1000, 1400, 0.5) == pytest.approx((1013.0909, 1386.9091), abs=1e-4)
    assert elo_update(1000, 1000, 1.0, k=10) == pytest.approx((1005.0, 995.0))
    with pytest.raises(ValueError, match="score_a"):
        elo_update(1000, 1000, 2.0)


def test_the_record_rates_the_learner_and_each_snapshot_game_by_game() -> None:
    record = LeagueRecord()
    state = {"w": np.ones(2, dtype=np.float32)}
    record.add_game({"opponent": "latest", "result": 1, "snapshot": {"name": "0.0.0", "updates": 5, "state": state}})
    assert record.ratings == {"latest": ELO_INITIAL, "0.0.0": ELO_INITIAL}  # self-play games are not rated
    record.add_game({"opponent": "0.0.0", "result": 1})
    assert (record.ratings["latest"], record.ratings["0.0.0"]) == pytest.approx((1016.0, 984.0))
    record.add_game({"opponent": "0.0.0", "result": -1})
    # E = 1 / (1 + 10^(-32/400)) = 0.545922; 32 * (0 - 0.545922) = -17.4695
    assert (record.ratings["latest"], record.ratings["0.0.0"]) == pytest.approx((998.5305, 1001.4695), abs=1e-4)
    assert record.results == {"latest": [1, 0, 0], "0.0.0": [1, 0, 1]}
    assert record.snapshots["0.0.0"].results == [1, 0, 1] and record.snapshots["0.0.0"].updates == 5
    # a game arriving before its snapshot (episodes of different envs are not ordered): rated from 1000
    record.add_game({"opponent": "0.1.0", "result": 0})
    assert record.ratings["0.1.0"] == pytest.approx(1000 - 32 * (0.5 - elo_expected(998.5305, 1000)), abs=1e-4)
    record.add_game({"opponent": "latest", "result": 0, "dropped": ["0.0.0"]})
    assert list(record.snapshots) == [] and "0.0.0" in record.ratings  # a dropped snapshot's rating stays
    values = Values()
    logger = Logger(folder=None, output_formats=[values])
    record.record(logger)
    logger.dump()
    assert values.dumps[-1]["games/snapshots"] == 0 and values.dumps[-1]["games/elo/latest"] == record.learner_rating


# ----------------------------------------------------------------------------------------------- the opponent mix
def test_opponent_probabilities_mix_latest_uniform_and_prioritized() -> None:
    pool = OpponentPool(latest=0.5, uniform=0.2, prioritized=0.3)
    assert snapshot_score([2, 0, 0]) == pytest.approx(0.25) and snapshot_score([0, 0, 2]) == pytest.approx(0.75)
    assert snapshot_score([0, 0, 0]) == 0.5 and snapshot_score([0, 2, 0]) == 0.5
    # scores 0.25 and 0.75: 0.2 / 2 + 0.3 * 0.25 = 0.175 and 0.1 + 0.3 * 0.75 = 0.325
    assert opponent_probabilities(pool, [[2, 0, 0], [0, 0, 2]]) == pytest.approx([0.5, 0.175, 0.325])
    assert opponent_probabilities(pool, []) == pytest.approx([1.0])  # no snapshot yet: the latest policy
    # weights need not sum to 1
    assert opponent_probabilities(OpponentPool(latest=1, uniform=1, prioritized=0), [[0, 0, 0]] * 4) == pytest.approx(
        [0.5, 0.125, 0.125, 0.125, 0.125]
    )
    default = OpponentPool()
    assert (default.latest, default.uniform, default.prioritized) == (0.5, 0.0, 0.5)
    assert OpponentPool.of("league") == default and OpponentPool.of("self") is None


def test_each_episode_draws_its_opponent_with_the_mix_frequencies() -> None:
    updates = [0]
    league = League(OpponentPool(snapshot_interval=1, latest=0.5, uniform=0.2, prioritized=0.3), small_policy(),
                    updates=lambda: updates[0], seed=0)  # fmt: skip
    for count in (0, 1, 2):
        updates[0] = count
        league.maybe_snapshot()
    first, second = league.snapshots
    first.state.results[:] = [2, 0, 0]  # the learner beat it twice: score 0.25
    second.state.results[:] = [0, 0, 2]  # it beat the learner twice: score 0.75
    player = LeaguePlayer(league, PolicyPlayer(league.policy))
    n = 20_000
    drawn = {"latest": 0, first.state.name: 0, second.state.name: 0}
    for _ in range(n):
        player.start_game()  # the update count did not move: no new snapshot
        drawn["latest" if player.opponent is None else player.opponent.state.name] += 1
    frequencies = np.array(list(drawn.values())) / n
    # expected 0.5, 0.175, 0.325; the standard error is at most 0.0036, and a uniform draw among the snapshots would
    # give 0.25 each
    assert frequencies == pytest.approx([0.5, 0.175, 0.325], abs=0.015)


# ------------------------------------------------------------------------------------------- snapshots and sizes
def test_snapshots_come_every_interval_of_updates_and_the_oldest_go_first() -> None:
    policy = small_policy()
    updates = [0]
    league = League(OpponentPool(snapshot_interval=5, size=3), policy, rank=1, updates=lambda: updates[0], seed=0)
    taken = []
    for count in (0, 4, 5, 9, 10, 12, 19, 41):
        updates[0] = count
        with torch.no_grad():
            next(policy.parameters()).fill_(count)  # the policy as it is at this count
        if league.maybe_snapshot():
            taken.append(count)
        if count == 5:  # a game ends: it carries the first snapshot to the main process
            assert league.record(None, 1)["snapshot"]["name"] == "0.1.0"
    assert taken == [5, 10, 19, 41]  # one at the first start past 5, 10, 15 (seen at 19) and 40 (at 41)
    assert [s.state.name for s in league.snapshots] == ["0.1.1", "0.1.2", "0.1.3"]  # size 3: the first dropped
    assert [s.state.updates for s in league.snapshots] == [10, 19, 41]
    name = next(iter(policy.state_dict()))
    for snapshot, count in zip(league.snapshots, (10, 19, 41)):
        assert np.all(snapshot.state.state[name] == count)  # the parameters at that time, kept
        assert torch.all(next(snapshot.player.policy.parameters()) == count)  # and the player plays them
    # the next finished games carry the other snapshots, one each, and the drop of the one sent before
    extras = [league.record(None, 1) for _ in range(4)]
    assert [extra.get("snapshot", {}).get("name") for extra in extras] == ["0.1.1", "0.1.2", "0.1.3", None]
    assert extras[0]["dropped"] == ["0.1.0"] and all("dropped" not in extra for extra in extras[1:])


def test_a_snapshot_dropped_before_it_was_sent_is_never_sent() -> None:
    updates = [0]
    league = League(OpponentPool(snapshot_interval=1, size=1), small_policy(), updates=lambda: updates[0])
    for count in range(4):
        updates[0] = count
        league.maybe_snapshot()
    extras = [league.record(None, 0) for _ in range(2)]
    assert extras[0]["snapshot"]["name"] == "0.0.2" and "dropped" not in extras[0] and extras[1] == {"opponent": "latest"}


def test_restored_snapshots_are_shared_out_and_kept_up_to_the_size() -> None:
    state = small_policy().state_dict()
    arrays = {key: value.numpy() for key, value in state.items()}
    kept = [SnapshotState(f"0.0.{i}", i, arrays, [i, 0, 0]) for i in range(5)]
    seed = LeagueSeed(generation=2, snapshots=kept)
    worker_1 = League(OpponentPool(size=1), small_policy(), rank=1, start=seed, n_workers=2)
    assert [s.state.name for s in worker_1.snapshots] == ["0.0.3"] and worker_1.generation == 2
    assert worker_1.record(None, 1)["dropped"] == ["0.0.1"]  # beyond its size: given back at once
    worker_0 = League(OpponentPool(size=5), small_policy(), rank=0, start=seed, n_workers=2)
    assert [s.state.name for s in worker_0.snapshots] == ["0.0.0", "0.0.2", "0.0.4"]
    assert worker_0.snapshots[2].state.results == [4, 0, 0] and worker_0.snapshots[2].state.results is not kept[4].results


# ------------------------------------------------------------------------------------------ the game and the seats
def test_league_games_accept_the_pool_and_play_random_without_a_player() -> None:
    for opponent in ("league", OpponentPool(size=2)):
        game = TurnBasedGame(strict_tictactoe(), opponent=opponent)
        game.reset(seed=0)
        done = False
        while not done:
            _, _, terminated, truncated, info = game.step(int(np.flatnonzero(game.action_masks())[0]))
            done = terminated or truncated
        assert "opponent" not in info["game"]  # no league attached: a random player, no league record
    with pytest.raises(TypeError, match="league"):
        TurnBasedGame(strict_tictactoe(), opponent=3)
    with pytest.raises(ValueError, match="opponent"):
        play_games(None, strict_tictactoe, 2, opponent="league")
    with pytest.raises(ValueError, match="size"):
        OpponentPool(size=0)
    with pytest.raises(ValueError, match="positive"):
        OpponentPool(latest=0, uniform=0, prioritized=0)


def test_a_workers_league_games_share_one_league_and_self_play_games_keep_theirs() -> None:
    policy = small_policy()
    venv = DummyVecEnv([tictactoe_league(), tictactoe_league(), lambda: TurnBasedGame(strict_tictactoe())])
    assert attach_opponents(venv, policy, seed=1, rank=0, updates=lambda: 0) == 3
    players = [env.unwrapped.player for env in venv.envs]
    assert isinstance(players[0], LeaguePlayer) and players[0].league is players[1].league
    assert [players[0].latest.epsilon, players[1].latest.epsilon] == [0.0, 1.0]  # self-play's spread, for the latest
    assert isinstance(players[2], PolicyPlayer)
    mixed = DummyVecEnv([tictactoe_league(OpponentPool(size=2)), tictactoe_league(OpponentPool(size=3))])
    with pytest.raises(ValueError, match="different opponent pools"):
        attach_opponents(mixed, policy)


# ------------------------------------------------------------------------------------- training against a league
def games_per_opponent(model: Any) -> dict[str, int]:
    return {name: sum(counts) for name, counts in model.league.results.items()}


def test_a3c_trains_against_its_league_and_keeps_it_through_save_and_load(tmp_path: Any) -> None:
    """A3C on tic-tac-toe (a game that raises on an illegal move), 2 serial workers, a snapshot every 10 updates:
    games against the latest policy and against snapshots of both workers, about half each, a snapshot per 10 updates of
    each worker, at most 3 kept per worker, the ratings and keys logged; saved and loaded, the snapshots are the same
    and the next learn() plays them."""
    pool = OpponentPool(snapshot_interval=10, size=3)
    model = sb3_async.A3C("MlpPolicy", tictactoe_league(pool), n_workers=2, n_envs_per_worker=2, backend="serial",
                          seed=0, policy_kwargs=dict(net_arch=[32]))  # fmt: skip
    values = Values()
    model.set_logger(Logger(folder=None, output_formats=[values]))
    model.learn(2_000, log_interval=20)
    record = model.league
    assert record is not None
    played = games_per_opponent(model)
    snapshot_games = sum(count for name, count in played.items() if name != "latest")
    total = sum(played.values())
    assert total > 200 and 0.3 < snapshot_games / total < 0.6  # half the games, once the first snapshots exist
    assert {name.split(".")[1] for name in played if name != "latest"} == {"0", "1"}  # both workers' snapshots
    for rank, updates in enumerate(model.gradient_sharing.update_counts.tolist()):
        names = [name for name in record.ratings if name.startswith(f"0.{rank}.")]
        assert updates // 10 - 3 <= len(names) <= updates // 10  # one per 10 updates (the last few maybe not yet sent)
        assert len([name for name in record.snapshots if name.startswith(f"0.{rank}.")]) <= 3
    assert len(record.snapshots) >= 4
    logged = {key for dump in values.dumps for key in dump}
    assert {"games/elo/latest", "games/snapshots", "games/vs_snapshots_win_rate", "games/vs_latest_share"} <= logged
    assert any(key.startswith("games/elo/0.") for key in logged)

    table = league_table(model, strict_tictactoe, n_games=4, seed=0)
    assert list(table) == list(record.snapshots) and all(results.games == 4 for results in table.values())

    model.save(tmp_path / "model.zip")
    loaded = sb3_async.A3C.load(tmp_path / "model.zip", backend="serial")
    assert loaded.league is not None and list(loaded.league.snapshots) == list(record.snapshots)
    assert loaded.league.ratings == pytest.approx(record.ratings)
    for name, snapshot in record.snapshots.items():
        for key, value in snapshot.state.items():
            np.testing.assert_array_equal(loaded.league.snapshots[name].state[key], value)
    restored = {name: sum(loaded.league.results.get(name, [])) for name in loaded.league.snapshots}
    loaded.learn(800, reset_num_timesteps=False)
    after = games_per_opponent(loaded)
    assert any(after.get(name, 0) > count for name, count in restored.items())  # the restored snapshots played again
    assert any(name.startswith("1.") for name in loaded.league.ratings)  # the second learn() call's own snapshots


@pytest.mark.parametrize("algo", ["AsyncNStepQ", "ApeXDQN"])
def test_the_q_family_and_apex_play_their_league_on_processes(algo: str) -> None:
    """backend="mp": the snapshots and results cross the workers' pipes."""
    pool = OpponentPool(snapshot_interval=5, size=2)
    kwargs: dict[str, Any] = dict(n_actors=1, learning_starts=200) if algo == "ApeXDQN" else dict(n_workers=2)
    model = getattr(sb3_async, algo)("MlpPolicy", tictactoe_league(pool), seed=0, **kwargs)
    model.learn(2_500 if algo == "ApeXDQN" else 1_500)
    assert model.league is not None and model.league.snapshots
    played = games_per_opponent(model)
    assert played["latest"] > 0 and sum(count for name, count in played.items() if name != "latest") > 0
