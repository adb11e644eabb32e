"""Multi-agent PettingZoo envs in the env pool: every (env copy, agent) pair is one slot, so one shared policy acts for
every agent (parameter sharing).

:class:`AgentSlots` holds one copy of a PettingZoo env inside an :class:`~sb3_async.env_pool.host.EnvHost`: its
``possible_agents`` are consecutive slots of the pool (copy ``c`` of an env with ``n`` agents owns slots
``c * n .. c * n + n - 1``, in ``possible_agents`` order), stepped once with the actions of all its slots.

- An AEC env is converted with PettingZoo's own ``aec_to_parallel`` when its ``metadata["is_parallelizable"]`` says it
  may be; a turn-based one (the classic board games) becomes one slot, the learner's seat, its other seats played by
  an opponent (:class:`~sb3_async.env_pool.turns.TurnBasedGame`).
- Agents with different spaces are padded as SuperSuit's ``pad_observations_v0`` / ``pad_action_space_v0`` pad them:
  Box spaces of one dtype and rank to the largest shape (observations zero-padded, actions cut back to the agent's
  shape and clipped to its bounds), Discrete spaces to the largest ``n`` (an action an agent lacks becomes its action
  0). Any other mix is refused with a ``ValueError`` naming the agents and their spaces.
- ``agent_id=True`` appends a one-hot of the agent's index to 1-D Box observations.
- Agents that leave before the others (black-death padding): the slot's episode ends at the step its agent terminates
  or is truncated (as the env says, with its final observation), then the slot observes zeros, gets reward 0 and its
  actions are ignored, each such step flagged ``info["dead"] = True``, until its agent is back (the next episode of the
  copy, or an agent that joins): that stretch of padding then ends as a terminated episode (nothing to bootstrap from
  zeros). ``info["dead"]`` in a reset info says the slot's first observation is padding.

Every real episode of a slot ends with a Monitor-style ``info["episode"] = {"r", "l", "t"}`` (the agent's return,
length, and seconds since the copy was built), which the algorithms log as ``rollout/ep_rew_mean``.

With the pool's ``autoreset=False`` (:attr:`AgentSlots.autoreset`), PettingZoo's own semantics per slot instead: a slot
whose agent terminates, is truncated or leaves the env's ``agents`` reports that step (with its last observation) and
then neither steps nor reports until the copy is reset (no padding, no ``info["dead"]``); the copy is never reset
here, even once all its agents are gone. Every possible agent must then be present at reset (the pool's ``agents``
after a reset are all the copy's slots); an agent that comes back in the env's ``agents`` after it left stays out.

:class:`PettingZooEnv` builds a PettingZoo env from a gymnasium-style id: an id of PettingZoo's own registry
(``"butterfly/pistonball-v6"``) or ``"<package>/<module>"`` naming the module that defines the env
(``"mpe2/simple_spread_v3"``); the RL Zoo command line takes such ids as ``--env`` (:mod:`sb3_async.zoo`).

This module does not import torch; it imports PettingZoo only where a PettingZoo env is already loaded.
"""

from __future__ import annotations

import importlib
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from sb3_async.env_pool.shared_buffers import FINAL_INFO, FINAL_OBS, SharedBuffers
from sb3_async.env_pool.turns import TurnBasedGame, is_turn_based

__all__ = [
    "DEAD_AGENTS",
    "AgentSlots",
    "PettingZooEnv",
    "agent_slots_factory",
    "as_agent_slots",
    "is_multi_agent",
    "pettingzoo_env_id",
]

#: How the pool treats agents that leave an episode before the others: padded with zeros ("black death").
DEAD_AGENTS = ("pad",)


def is_multi_agent(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo env (``ParallelEnv`` or ``AECEnv``). A PettingZoo env imports PettingZoo, so
    without it loaded the answer is no, at no import cost."""
    if "pettingzoo" not in sys.modules:
        return False
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    return isinstance(env, (AECEnv, ParallelEnv))


def as_parallel(env: Any) -> Any:
    """``env`` as a PettingZoo ``ParallelEnv``: an AEC env through PettingZoo's ``aec_to_parallel`` where legal."""
    from pettingzoo.utils.conversions import aec_to_parallel
    from pettingzoo.utils.env import AECEnv

    if not isinstance(env, AECEnv):
        return env
    if not (getattr(env, "metadata", None) or {}).get("is_parallelizable", False):
        raise ValueError(
            f"Invalid env {env}: an AEC env whose agents act in turns (metadata['is_parallelizable'] is not True) cannot"
            " be converted to a ParallelEnv by PettingZoo's aec_to_parallel, and agent slots step every agent of a copy at"
            " once; give the pool the env itself (it steps a turn-based game as a TurnBasedGame: one slot, the learner's"
            " seat)"
        )
    return aec_to_parallel(env)


def _describe(spaces_of: dict[Any, spaces.Space]) -> str:
    return ", ".join(f"{agent!r}: {space}" for agent, space in spaces_of.items())


def padded_space(spaces_of: dict[Any, spaces.Space], what: str) -> spaces.Space:
    """One space holding every agent's values (SuperSuit's homogenisation): the common space when all are equal, else
    Box spaces of one dtype and rank padded to the largest shape, or Discrete spaces (start 0) to the largest ``n``.

    :param what: "observation" or "action", for the error message
    """
    first = next(iter(spaces_of.values()))
    if all(space == first for space in spaces_of.values()):
        return first
    if all(isinstance(space, spaces.Box) for space in spaces_of.values()):
        boxes: list[spaces.Box] = list(spaces_of.values())  # type: ignore[arg-type]
        if len({box.dtype for box in boxes}) == 1 and len({len(box.shape) for box in boxes}) == 1:
            shape = tuple(int(size) for size in np.max([box.shape for box in boxes], axis=0))
            lows = [_pad(box.low, shape, min(0.0, float(np.min(box.low)))) for box in boxes]
            highs = [_pad(box.high, shape, max(0.0, float(np.max(box.high)))) for box in boxes]
            return spaces.Box(np.min(lows, axis=0), np.max(highs, axis=0), shape, first.dtype)  # type: ignore[arg-type]
    if all(isinstance(space, spaces.Discrete) and space.start == 0 for space in spaces_of.values()):
        return spaces.Discrete(max(int(space.n) for space in spaces_of.values()))  # type: ignore[attr-defined]
    raise ValueError(
        f"The agents have different {what} spaces the pool cannot pad to one ({_describe(spaces_of)}): padding applies to"
        " Box spaces of one dtype and rank, or to Discrete spaces starting at 0"
    )


def _pad(array: np.ndarray, shape: tuple[int, ...], value: float) -> np.ndarray:
    if array.shape == shape:
        return array
    return np.pad(array, [(0, new - old) for new, old in zip(shape, array.shape)], constant_values=value)


def _zeros(space: spaces.Space) -> Any:
    """A value of zeros of ``space`` (what a dead agent observes)."""
    if isinstance(space, spaces.Dict):
        return {key: _zeros(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_zeros(sub) for sub in space.spaces)
    return np.zeros(space.shape or (), dtype=space.dtype)


def _with_zero(space: spaces.Space) -> spaces.Space:
    """``space`` widened so that it holds the zeros of a dead agent (a Box whose bounds exclude 0)."""
    if isinstance(space, spaces.Box) and (np.any(space.low > 0) or np.any(space.high < 0)):
        return spaces.Box(np.minimum(space.low, 0), np.maximum(space.high, 0), space.shape, space.dtype)  # type: ignore[arg-type]
    return space


class AgentSlots:
    """One copy of a PettingZoo env, its agents as consecutive slots of the pool's buffers (see the module's notes).

    :param env: a PettingZoo ``ParallelEnv``, or an ``AECEnv`` PettingZoo can convert
    :param agent_id: append a one-hot of the agent's index to the observations (1-D Box observations only)
    """

    def __init__(self, env: Any, agent_id: bool = False):
        self.env = as_parallel(env)
        self.names = list(self.env.possible_agents)
        self._slot_of = {agent: k for k, agent in enumerate(self.names)}
        if not self.names:
            raise ValueError(f"Invalid env {env}: it has no possible_agents")
        self.agent_id = agent_id
        self._obs_spaces = {agent: self.env.observation_space(agent) for agent in self.names}
        self._act_spaces = {agent: self.env.action_space(agent) for agent in self.names}
        observation_space = _with_zero(padded_space(self._obs_spaces, "observation"))
        if agent_id:
            if not (isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 1):
                raise ValueError(f"agent_id=True needs 1-D Box observations (a one-hot is appended), got {observation_space}")
            n = len(self.names)
            observation_space = spaces.Box(
                np.concatenate([observation_space.low, np.zeros(n, observation_space.dtype)]),
                np.concatenate([observation_space.high, np.ones(n, observation_space.dtype)]),
                dtype=observation_space.dtype,  # type: ignore[arg-type]
            )
        self.observation_space = observation_space
        self.action_space = padded_space(self._act_spaces, "action")
        self._padded_actions = {agent for agent, space in self._act_spaces.items() if space != self.action_space}
        self._zero_obs = _zeros(observation_space)
        #: The pool's slot of each agent, in ``names`` order (set by the host that holds this copy)
        self.slots: list[int] = []
        #: The pool's ``autoreset`` (set by the host): False steps and reports the live agents' slots only and never
        #: resets the copy (see the module's notes)
        self.autoreset = True
        self.live: set[Any] = set()
        self._returns = np.zeros(len(self.names))
        self._lengths = np.zeros(len(self.names), dtype=np.int64)
        self._started = time.time()

    # ---------------------------------------------------------------- values
    def _observation(self, k: int, obs: Any) -> Any:
        """Agent ``k``'s observation in the common space: padded, with its one-hot when ``agent_id``."""
        space = self.observation_space
        if not isinstance(space, spaces.Box):
            return obs
        array = np.asarray(obs, dtype=space.dtype)
        if self.agent_id:
            n = len(self.names)
            array = _pad(array, (space.shape[0] - n,), 0)
            one_hot = np.zeros(n, dtype=space.dtype)
            one_hot[k] = 1
            return np.concatenate([array, one_hot])
        return _pad(array, space.shape, 0)

    def _action(self, agent: Any, action: Any) -> Any:
        """A slot's action as its agent's own action space takes it (cut back, clipped, or 0 for a Discrete action the
        agent lacks)."""
        if agent not in self._padded_actions:
            return action
        space = self._act_spaces[agent]
        if isinstance(space, spaces.Box):
            cut = np.asarray(action)[tuple(slice(0, size) for size in space.shape)]
            return np.clip(cut, space.low, space.high).astype(space.dtype)
        return action if int(action) < int(space.n) else type(action)(0)  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- commands
    def reset(self, buffers: SharedBuffers, seed: int | None, options: dict[str, Any] | None) -> dict[int, dict]:
        """Reset the copy; each slot's first observation into the buffers. Returns each slot's reset info."""
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._start_episode(buffers, observations, infos)

    def _check_agents(self, agents: Any, observations: dict) -> None:
        """``ValueError`` if the env names an agent outside its ``possible_agents`` (it would have no slot)."""
        known = self._slot_of
        if all(agent in known for agent in agents) and all(agent in known for agent in observations):
            return
        unknown = sorted({repr(a) for a in (*agents, *observations) if a not in known})
        raise ValueError(
            f"Env {self.env} returned agent {', '.join(unknown)}, not among its possible_agents {self.names}: the pool "
            "gives each possible agent a slot, so every agent an env has must be listed there"
        )

    def _start_episode(self, buffers: SharedBuffers, observations: dict, infos: dict) -> dict[int, dict]:
        self._check_agents(self.env.agents, observations)
        self.live = set(self.env.agents)
        if not self.autoreset and (len(self.live) < len(self.names) or len(observations.keys() & self.live) < len(self.live)):
            absent = [agent for agent in self.names if agent not in self.live or agent not in observations]
            raise ValueError(
                f"Env {self.env} has no agent {', '.join(map(repr, absent))} (or no observation for it) at reset: with "
                "autoreset=False the pool's agents after a reset are all the slots of the env copy, so every possible "
                "agent must be there; use autoreset=True, which pads the slots of absent agents"
            )
        self._returns[:] = 0.0
        self._lengths[:] = 0
        slot_infos = {}
        for k, (agent, i) in enumerate(zip(self.names, self.slots)):
            if agent in self.live and agent in observations:
                buffers.obs.write(i, self._observation(k, observations[agent]))
                slot_infos[i] = dict(infos.get(agent) or {})
            else:
                buffers.obs.write(i, self._zero_obs)
                slot_infos[i] = {"dead": True}
        return slot_infos

    def _live_result(self, k: int, agent: Any, result: tuple, remaining: set) -> tuple[Any, float, bool, bool, dict]:
        """Live agent ``k``'s ``(observation, reward, terminated, truncated, info)`` from the env's step ``result``: an
        agent that left the env's ``agents`` without a flag is truncated, and an episode's end adds its statistics."""
        observations, rewards, terminations, truncations, infos = result
        reward = float(rewards.get(agent, 0.0))
        ended, cut = bool(terminations.get(agent, False)), bool(truncations.get(agent, False))
        if not (ended or cut) and agent not in remaining:  # left without a flag: cut short
            cut = True
        obs = self._observation(k, observations[agent]) if agent in observations else _zeros(self.observation_space)
        info = dict(infos.get(agent) or {})
        self._returns[k] += reward
        self._lengths[k] += 1
        if ended or cut:
            info["episode"] = {
                "r": float(self._returns[k]),
                "l": int(self._lengths[k]),
                "t": round(time.time() - self._started, 6),
            }
            self._returns[k], self._lengths[k] = 0.0, 0
        return obs, reward, ended, cut, info

    def _env_step(self, buffers: SharedBuffers) -> tuple[tuple, set]:
        """Step the env with the actions of the live agents' slots; returns its step result and its agents after it."""
        live, read = self.live, buffers.actions.item
        actions = {agent: self._action(agent, read(i)) for agent, i in zip(self.names, self.slots) if agent in live}
        result = self.env.step(actions)
        self._check_agents(self.env.agents, result[0])
        return result, set(self.env.agents)

    def step(self, buffers: SharedBuffers) -> dict[int, dict]:
        """Step the copy with its slots' actions in the buffers (only its live agents act), write each slot's result
        and, where a slot's episode ended, its next observation (same-step autoreset, see the module's notes; with
        ``autoreset=False``, :meth:`_step_to_the_end`).

        :return: each slot's info
        """
        if not self.autoreset:
            return self._step_to_the_end(buffers)
        live, names, slots = self.live, self.names, self.slots
        result, remaining = self._env_step(buffers)
        observations = result[0]
        over = not remaining
        results = []  # per slot: (observation, reward, terminated, truncated, info)
        for k, agent in enumerate(names):
            if agent in live:
                obs, reward, ended, cut, info = self._live_result(k, agent, result, remaining)
            else:  # black death: a padding step, which ends when the agent is back
                reward, cut, obs, info = 0.0, False, _zeros(self.observation_space), {"dead": True}
                ended = over or agent in remaining
            results.append((obs, reward, ended, cut, info))
        slot_infos: dict[int, dict] = {}
        if over:  # every agent left: the copy starts its next episode
            reset_obs, reset_infos = self.env.reset()
            slot_infos = self._start_episode(buffers, reset_obs, reset_infos)
        for k, (agent, i) in enumerate(zip(names, slots)):
            obs, reward, ended, cut, info = results[k]
            buffers.rewards[i], buffers.terminated[i], buffers.truncated[i] = reward, ended, cut
            if not (ended or cut):
                buffers.obs.write(i, obs)
                slot_infos[i] = info
                continue
            if not over:  # the slot's next "episode": its agent's, back, or padding
                back = agent in remaining and agent in observations
                buffers.obs.write(i, self._observation(k, observations[agent]) if back else self._zero_obs)
                slot_infos[i] = {} if back else {"dead": True}
            slot_infos[i] = {**slot_infos[i], FINAL_OBS: obs, FINAL_INFO: info}
        if not over:
            self.live = remaining
        return slot_infos

    def _step_to_the_end(self, buffers: SharedBuffers) -> dict[int, dict]:
        """:meth:`step` with ``autoreset=False``: only the live agents' slots are stepped and written; a slot whose agent
        ended (or left the env's ``agents``) reports its last observation and leaves :attr:`live` until the copy is
        reset, and the copy is not reset here, even once every agent is gone.

        :return: the infos of the slots stepped that are not empty
        """
        live = self.live
        result, remaining = self._env_step(buffers)
        slot_infos: dict[int, dict] = {}
        still = set()
        for k, (agent, i) in enumerate(zip(self.names, self.slots)):
            if agent not in live:
                continue
            obs, reward, ended, cut, info = self._live_result(k, agent, result, remaining)
            buffers.obs.write(i, obs)
            buffers.rewards[i], buffers.terminated[i], buffers.truncated[i] = reward, ended, cut
            if info:
                slot_infos[i] = info
            if not (ended or cut):
                still.add(agent)
        self.live = still
        return slot_infos

    def restarted(self, buffers: SharedBuffers, error: str) -> dict[int, dict]:
        """After this copy was rebuilt (``on_error="restart"``): every slot's episode ends truncated, the new copy
        reset (with ``autoreset=False``, left for the pool's ``reset``, as a gymnasium env). Returns each slot's info."""
        final_obs = {i: buffers.obs.item(i) for i in self.slots}  # the slots still hold the last observations
        for i in self.slots:
            buffers.rewards[i], buffers.terminated[i], buffers.truncated[i] = 0.0, False, True
        if not self.autoreset:
            self.live = set()
            return {i: {"error": error} for i in self.slots}
        infos = self.reset(buffers, None, None)
        return {i: {**infos[i], FINAL_OBS: final_obs[i], FINAL_INFO: {}, "error": error} for i in self.slots}

    # ---------------------------------------------------------------- attributes (the pool's get_attr, call, render)
    def get_wrapper_attr(self, name: str) -> Any:
        if name in ("observation_space", "action_space", "agent_id"):
            return getattr(self, name)
        return getattr(self.env, name)

    def set_wrapper_attr(self, name: str, value: Any) -> None:
        setattr(self.env, name, value)

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def agent_slots_factory(factory: Callable[[], Any]) -> AgentSlots:
    """``factory``'s PettingZoo env as :class:`AgentSlots` with ``agent_id=True`` (the pool's factories then)."""
    env = factory()
    if not is_multi_agent(env):
        raise ValueError(f"agent_id=True applies to multi-agent PettingZoo envs only, got {env}")
    if is_turn_based(env):
        raise ValueError(
            f"Invalid agent_id=True for {env}: a turn-based game is one slot per copy (the learner's seat, its observation"
            " the seat's own), so there is no agent index to append; drop agent_id"
        )
    return AgentSlots(env, agent_id=True)


def as_agent_slots(env: Any) -> Any:
    """``env`` as :class:`AgentSlots` if it is a PettingZoo env, as a :class:`~sb3_async.env_pool.turns.TurnBasedGame`
    (one slot, the learner's seat) if it is a turn-based AEC game, else ``env`` itself (a gymnasium env)."""
    if isinstance(env, AgentSlots) or not is_multi_agent(env):
        return env
    if is_turn_based(env):
        return TurnBasedGame(env)
    return AgentSlots(env)


_ENV_ID = re.compile(r"(?P<package>[A-Za-z_][\w.]*)/(?P<name>[A-Za-z_][\w-]*)")


def _registry_type(env_id: str) -> str | None:
    """``"parallel"`` or ``"aec"``: the PettingZoo registry (PettingZoo 1.27 and later) that has ``env_id``."""
    import pettingzoo

    if not hasattr(pettingzoo, "parallel_registry"):
        return None
    for env_type in ("parallel", "aec"):
        try:
            pettingzoo.spec(env_type, env_id)
        except Exception:  # the registry's NameNotFound, NamespaceNotFound, VersionNotFound
            continue
        return env_type
    return None


def _env_module(env_id: str) -> Any:
    """The module ``package.name`` of ``env_id`` = ``"package/name"`` if it defines ``parallel_env`` or ``env``."""
    match = _ENV_ID.fullmatch(env_id)
    if match is None or "-" in match["name"]:
        return None
    try:
        module = importlib.import_module(f"{match['package']}.{match['name']}")
    except ImportError:
        return None
    return module if any(callable(getattr(module, maker, None)) for maker in ("parallel_env", "env")) else None


def pettingzoo_env_id(env_id: str) -> str | None:
    """``env_id`` if it names a PettingZoo env (see :class:`PettingZooEnv`), else None."""
    if _ENV_ID.fullmatch(env_id) is None:
        return None
    try:
        import pettingzoo  # noqa: F401
    except ImportError:
        return None
    return env_id if _env_module(env_id) is not None or _registry_type(env_id) is not None else None


class PettingZooEnv:
    """A factory of the PettingZoo env named ``env_id``, picklable by that name and its arguments (a saved model
    rebuilds its env from it wherever the env is installed). ``env_id`` is

    - an id of PettingZoo's own registry (PettingZoo 1.27 and later), e.g. ``"butterfly/pistonball-v6"``: built by
      ``pettingzoo.make("parallel", env_id, **env_kwargs)`` (an AEC env, converted by the pool, where the registry
      has no parallel one);
    - or ``"<package>/<module>"``, naming the module ``<package>.<module>`` that defines the env, e.g.
      ``"mpe2/simple_spread_v3"`` for ``mpe2.simple_spread_v3``: built by its ``parallel_env(**env_kwargs)`` (or its
      ``env(**env_kwargs)``, an AEC env).

    :param env_id: the env's name, as above
    :param env_kwargs: the env's arguments, e.g. ``{"max_cycles": 25, "continuous_actions": True}``
    :param opponent: for a turn-based game, who plays its other seats (``TurnBasedGame``'s ``opponent``: ``"self"``,
        ``"random"``, ``"league"``, an ``OpponentPool``...); None leaves the pool's default, ``"self"``
    :raises ValueError: (when called) for an ``opponent`` given to an env that is not a turn-based game
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, opponent: Any = None):
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.opponent = opponent

    def __call__(self) -> Any:
        env = self._make()
        if self.opponent is None:
            return env
        if not is_turn_based(env):
            env.close()
            raise ValueError(
                f"Invalid opponent={self.opponent!r} for {self.env_id}: an opponent plays the other seats of a"
                " turn-based game (a PettingZoo AEC game such as classic/connect_four-v3), and this env is not one"
            )
        return TurnBasedGame(env, opponent=self.opponent)

    def _make(self) -> Any:
        module = _env_module(self.env_id)
        if module is not None:
            return (getattr(module, "parallel_env", None) or module.env)(**self.env_kwargs)
        env_type = _registry_type(self.env_id)
        if env_type is None:
            raise ValueError(
                f"Invalid env id {self.env_id!r}: neither an id of PettingZoo's registry nor '<package>/<module>' naming"
                " an importable module that defines parallel_env (e.g. 'mpe2/simple_spread_v3')"
            )
        import pettingzoo

        return pettingzoo.make(env_type, self.env_id, **self.env_kwargs)  # type: ignore[call-overload]

    def __repr__(self) -> str:
        opponent = "" if self.opponent is None else f", opponent={self.opponent!r}"
        return f"PettingZooEnv({self.env_id!r}, {self.env_kwargs!r}{opponent})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PettingZooEnv) and (other.env_id, other.env_kwargs, other.opponent) == (
            self.env_id,
            self.env_kwargs,
            self.opponent,
        )

    def __hash__(self) -> int:
        return hash(self.env_id)
