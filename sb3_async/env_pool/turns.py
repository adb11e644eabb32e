"""Turn-based PettingZoo games (the AEC envs of ``pettingzoo.classic``: connect_four_v3, tictactoe_v3, chess_v6...) as
single-agent gymnasium envs: one seat learns, the other seats are played by an opponent.

:class:`TurnBasedGame` wraps one AEC env. Each episode one seat is the learner's (the seats take turns, episode by
episode); a step plays the learner's move, then every other seat's move up to the learner's next turn, so that a
transition runs from one of the learner's turns to its next, and only the seat to move acts:

- the observation is the learner's ``observation`` (agent-relative, as the games give it), and the ``action_mask``
  of its observation (or of its info) is the env's :meth:`~TurnBasedGame.action_masks`, sb3-contrib's convention,
  which every discrete algorithm of sb3_async and ``MaskablePPO`` read;
- the reward of a step is the learner's reward over that stretch (PettingZoo's ``last()``: its reward since its own
  last move), so a win is +1 on the winner's last move and a loss -1 on the loser's last move, also when the
  opponent's move ends the game;
- the last info of an episode holds ``info["game"] = {"seat": k, "agent": name, "result": r}``, ``r`` the sign of the
  learner's return (1 win, 0 draw, -1 loss), for per-seat statistics;
- a game that ends before the learner's first move (the opponent folds, resigns or wins at once) is played to its end
  inside :meth:`~TurnBasedGame.reset`, which then starts the next game, until the learner has a move: no episode
  starts at a finished state. Such games are reported with the next episode's end, in
  ``info["game"]["ended_at_reset"]``: a list of ``{"seat", "agent", "result", "r"}`` (``r`` the learner's reward),
  which ``learn()`` counts in its per-seat statistics as episodes of no step;
- an episode cut short (truncated) where the learner has no legal move ends as terminated instead: nothing can be
  bootstrapped from a state without a legal action, so its value is 0, as a terminal state's.

Games of more than two seats (Hanabi with 3 to 5 players) work the same way: every seat but the learner's is played by
the opponent, and the learner's reward is its own (in a cooperative game, the team's reward as its seat gets it).

The other seats' moves come from ``opponent``:

- ``"self"`` (the default): the policy that trains on the game plays them (self-play with one shared policy). An
  algorithm attaches its policy to the games of each of its workers (:meth:`TurnBasedGame.attach_player`); a game no
  policy was attached to (an :class:`~sb3_async.env_pool.AsyncEnvPool` used alone) plays them as ``"random"`` does;
- ``"league"`` or an :class:`sb3_async.games.OpponentPool`: a league of past selves, each episode's opponent drawn
  from the latest policy and snapshots of it (:mod:`sb3_async.games.league`); an algorithm attaches it as for
  ``"self"``, and a game without it plays as ``"random"`` does;
- ``"random"``: a uniformly random legal move;
- a callable ``player(observation, action_mask) -> action``, for example a saved model
  (:class:`sb3_async.games.ModelPlayer`).

This module does not import torch; it imports PettingZoo only where a PettingZoo env is already loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["OPPONENTS", "Player", "TurnBasedGame", "is_turn_based"]

#: A player of a seat: ``player(observation, action_mask) -> action``, the mask a bool array (True: legal).
Player = Callable[[Any, np.ndarray], Any]

#: The opponents named by a string.
OPPONENTS = ("self", "random", "league")

#: Moves of other seats one step may play before the learner's turn must have come back (a game stuck in a loop).
_MAX_OTHER_MOVES = 10_000

#: Games one reset may see end before the learner's first move before it gives up (a game that never lets it move).
_MAX_GAMES_PER_RESET = 1_000


def _is_league(opponent: Any) -> bool:
    """Whether ``opponent`` is a league (``"league"``, or an ``OpponentPool``, marked ``is_league``)."""
    return opponent == "league" if isinstance(opponent, str) else bool(getattr(opponent, "is_league", False))


def is_turn_based(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC env that PettingZoo cannot convert to a ``ParallelEnv`` (its
    ``metadata["is_parallelizable"]`` is not True): the classic board and card games, whose agents act in turns."""
    if "pettingzoo" not in sys.modules:
        return False
    from pettingzoo.utils.env import AECEnv

    return isinstance(env, AECEnv) and not (getattr(env, "metadata", None) or {}).get("is_parallelizable", False)


def _seat_spaces(env: Any) -> tuple[spaces.Space, spaces.Discrete, bool]:
    """The observation and action spaces every seat shares, and whether observations are ``{"observation",
    "action_mask"}`` dicts."""
    agents = list(env.possible_agents)
    if not agents:
        raise ValueError(f"Invalid env {env}: it has no possible_agents")
    observations = {agent: env.observation_space(agent) for agent in agents}
    actions = {agent: env.action_space(agent) for agent in agents}
    for what, of in (("observation", observations), ("action", actions)):
        first = of[agents[0]]
        if any(space != first for space in of.values()):
            described = ", ".join(f"{agent!r}: {space}" for agent, space in of.items())
            raise ValueError(
                f"Invalid env {env}: its seats have different {what} spaces ({described}); one policy plays every seat"
            )
    observation_space, action_space = observations[agents[0]], actions[agents[0]]
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"Invalid env {env}: a turn-based game needs a Discrete action space, got {action_space}")
    masked = isinstance(observation_space, spaces.Dict) and "observation" in observation_space.spaces
    if masked:
        observation_space = observation_space["observation"]
    return observation_space, action_space, masked


class TurnBasedGame(gym.Env):
    """One turn-based PettingZoo AEC game as a single-agent env (see the module's notes).

    :param env: the AEC env, e.g. ``connect_four_v3.env()``
    :param opponent: who plays the other seats: ``"self"``, ``"league"`` (or an ``OpponentPool``), ``"random"`` or a
        ``player(observation, action_mask)`` callable (see the module's notes)
    :param seat: the learner's seat: ``None`` (the seats take turns, episode by episode), or a seat's index or agent
        name (always that seat)
    """

    metadata: dict[str, Any] = {"render_modes": ["human", "rgb_array"]}

    def __init__(self, env: Any, opponent: str | Player | Any = "self", seat: int | str | None = None):
        if isinstance(opponent, str) and opponent not in OPPONENTS:
            raise ValueError(f"Invalid opponent={opponent!r}: expected one of {', '.join(OPPONENTS)} or a callable player")
        if not isinstance(opponent, str) and not callable(opponent) and not _is_league(opponent):
            raise TypeError(f"Invalid opponent={opponent!r}: expected one of {', '.join(OPPONENTS)} or a callable player")
        self.env = env
        self.seats = list(env.possible_agents)
        self.observation_space, action_space, self._dict_obs = _seat_spaces(env)
        self.action_space: spaces.Discrete = action_space
        if seat is not None:
            if isinstance(seat, str):
                if seat not in self.seats:
                    raise ValueError(f"Invalid seat={seat!r}: the game's seats are {self.seats}")
                seat = self.seats.index(seat)
            elif not isinstance(seat, (int, np.integer)) or not 0 <= seat < len(self.seats):
                raise ValueError(f"Invalid seat={seat!r}: expected a seat index in [0, {len(self.seats)}) or an agent name")
        self.seat = seat
        self.opponent = opponent
        self.render_mode = getattr(env, "render_mode", None)
        #: The policy playing the other seats when ``opponent="self"`` (see :meth:`attach_player`)
        self.player: Player | None = None
        self._rng = np.random.default_rng()
        self._episodes = 0
        self._learner = self.seats[0]
        self.n_actions = int(self.action_space.n)
        self._mask = np.ones(self.n_actions, dtype=bool)
        self._return = 0.0
        #: The games that ended before the learner's first move since the last episode's end (see the module's notes)
        self._ended_at_reset: list[dict[str, Any]] = []

    # -------------------------------------------------------------------------------------------------------- players
    def attach_player(self, player: Player | None) -> None:
        """Let ``player`` play the other seats when ``opponent`` is ``"self"`` or a league (an algorithm attaches its
        policy). A player with ``start_game()`` is told of each episode start; one with ``end_game(result)`` of each end
        (the learner's result), and the dict it returns joins the episode's ``info["game"]``."""
        self.player = player

    def _other(self) -> Player | None:
        if callable(self.opponent):
            return self.opponent
        return self.player if self.opponent == "self" or _is_league(self.opponent) else None

    def _random_move(self, mask: np.ndarray) -> int:
        legal = np.flatnonzero(mask)
        if len(legal) == 0:
            raise ValueError(f"Invalid action mask of {self.env.agent_selection!r}: no legal action")
        return int(self._rng.choice(legal))

    # -------------------------------------------------------------------------------------------------------- the game
    @property
    def learner(self) -> str:
        """The agent name of the learner's seat in the current episode."""
        return self._learner

    def _split(self, observation: Any, info: dict[str, Any]) -> tuple[Any, np.ndarray]:
        """The policy's observation and the legal-action mask of one agent's raw observation."""
        mask = None
        if self._dict_obs:
            mask = observation.get("action_mask")
            observation = observation["observation"]
        if mask is None:
            mask = info.get("action_mask")
        if mask is None:
            return observation, np.ones(self.n_actions, dtype=bool)
        return observation, np.asarray(mask).astype(bool)

    def _play_others(self) -> None:
        """Play every other seat's move (dead seats step ``None``, as PettingZoo's loop does) until the learner's turn,
        or its last observation once its episode ended."""
        env = self.env
        for _ in range(_MAX_OTHER_MOVES):
            agent = env.agent_selection
            if agent == self._learner or not env.agents:
                return
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            observation, mask = self._split(env.observe(agent), env.infos[agent])
            player = self._other()
            env.step(self._random_move(mask) if player is None else player(observation, mask))
        raise RuntimeError(f"{env}: the learner's turn did not come back after {_MAX_OTHER_MOVES} moves of the other seats")

    def _learner_view(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        raw, reward, terminated, truncated, info = self.env.last()
        observation, self._mask = self._split(raw, info)
        return observation, float(reward), bool(terminated), bool(truncated), dict(info)

    def _end_game(self, result: int) -> dict[str, Any]:
        """The ``info["game"]`` of a game that ended with the learner's ``result``, what the player of the other seats
        adds to it (a league's opponent) included."""
        game = {"seat": self.seats.index(self._learner), "agent": self._learner, "result": result}
        end_game = getattr(self._other(), "end_game", None)
        if end_game is not None:
            game.update(end_game(result))
        return game

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Start the next game and play the other seats up to the learner's first move; a game that ends before it is
        counted (see the module's notes) and the next one started, so the observation returned is always one the
        learner moves from."""
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        for game in range(_MAX_GAMES_PER_RESET):
            # the env's own generator goes on from the seed for the games after the first
            self.env.reset(seed=seed if game == 0 else None, options=options)
            seat = self._episodes % len(self.seats) if self.seat is None else self.seat
            self._episodes += 1
            self._learner, self._return = self.seats[seat], 0.0
            start_game = getattr(self._other(), "start_game", None)
            if start_game is not None:
                start_game()
            self._play_others()
            if not self.env.agents:  # every seat left: the game ended with no observation for the learner
                self._mask = np.zeros(self.n_actions, dtype=bool)
                self._ended_at_reset.append({**self._end_game(0), "r": 0.0})
                continue
            observation, reward, terminated, truncated, info = self._learner_view()
            if not (terminated or truncated):
                return observation, info
            self._ended_at_reset.append({**self._end_game(int(np.sign(reward))), "r": reward})
        raise RuntimeError(
            f"{self.env}: {_MAX_GAMES_PER_RESET} games in a row ended before the learner's first move (seat "
            f"{self._learner!r}); a game the learner never moves in cannot be learned"
        )

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.env.agent_selection != self._learner or self._ended():
            raise RuntimeError(f"{self.env}: step() called after the episode ended; call reset()")
        self.env.step(int(action))
        self._play_others()
        observation, reward, terminated, truncated, info = self._learner_view()
        self._return += reward
        if truncated and not terminated and not self._mask.any():
            # cut short where the learner has no legal move: nothing to bootstrap from, its value is 0 (a terminal's)
            terminated, truncated = True, False
        if terminated or truncated:
            info["game"] = self._end_game(int(np.sign(self._return)))
            if self._ended_at_reset:
                info["game"]["ended_at_reset"], self._ended_at_reset = self._ended_at_reset, []
        return observation, reward, terminated, truncated, info

    def _ended(self) -> bool:
        """Whether the learner's episode is over (its seat terminated, truncated or gone)."""
        env, learner = self.env, self._learner
        return learner not in env.agents or bool(env.terminations.get(learner)) or bool(env.truncations.get(learner))

    def action_masks(self) -> np.ndarray:
        """The learner's legal actions (True: legal), sb3-contrib's ``action_masks()``."""
        return self._mask.copy()

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __repr__(self) -> str:
        return f"TurnBasedGame({self.env}, opponent={self.opponent!r})"
