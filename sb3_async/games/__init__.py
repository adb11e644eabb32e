"""Turn-based games: the players at a game's other seats (self-play, a league of past selves, a saved model) and the
evaluation of a model by the games it wins. The game itself, one seat learning as an env, is the env pool's
:class:`~sb3_async.env_pool.turns.TurnBasedGame` (its env processes step it without importing torch)."""

from sb3_async.games.evaluation import GameEvalCallback, GameResults, play_games
from sb3_async.games.league import OpponentPool, attach_opponents, elo_update, league_table
from sb3_async.games.players import ModelPlayer, PolicyPlayer, attach_self_play, self_play_epsilons

__all__ = [
    "GameEvalCallback",
    "GameResults",
    "ModelPlayer",
    "OpponentPool",
    "PolicyPlayer",
    "attach_opponents",
    "attach_self_play",
    "elo_update",
    "league_table",
    "play_games",
    "self_play_epsilons",
]
