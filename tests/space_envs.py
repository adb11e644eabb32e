"""Small deterministic envs over every space the env pool supports, to compare its views with SB3's ``DummyVecEnv`` and
gymnasium's ``SyncVectorEnv`` (tests/env_pool/test_vec_env_semantics.py, tests/env_pool/test_gym_vector_env.py).

The classes and functions of this module travel to the workers by value (cloudpickle), so those never import it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

cloudpickle.register_pickle_by_value(sys.modules[__name__])

KINDS = ("box", "discrete", "multidiscrete", "multibinary", "dict", "tuple")  # "image" too, for observations


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    """Equal values of the same types (arrays: same dtype and shape; a dict and an OrderedDict are both dicts), but for
    the wall-clock time of VecMonitor's episodes."""
    if isinstance(theirs, dict):
        if path.endswith("['episode']"):
            ours, theirs = {k: v for k, v in ours.items() if k != "t"}, {k: v for k, v in theirs.items() if k != "t"}
        assert isinstance(ours, dict), f"{path}: {type(ours)} is not a dict"
        assert list(ours) == list(theirs) or set(ours) == set(theirs), f"{path}: keys {list(ours)} != {list(theirs)}"
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{path}[{key!r}]")
    elif isinstance(theirs, (tuple, list)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs), f"{path}: {ours!r} != {theirs!r}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{k}]")
    elif isinstance(theirs, np.ndarray) and theirs.dtype == object:  # gymnasium's final_obs
        assert isinstance(ours, np.ndarray) and ours.dtype == object and ours.shape == theirs.shape, f"{path}: {ours!r}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{k}]")
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), f"{path}: {type(ours)} is not an array"
        assert (ours.dtype, ours.shape) == (theirs.dtype, theirs.shape), f"{path}: {ours.dtype}{ours.shape} != {theirs.dtype}"
        np.testing.assert_array_equal(ours, theirs, err_msg=path)
    else:
        assert type(ours) is type(theirs), f"{path}: {type(ours).__name__} != {type(theirs).__name__}"
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


def make_space(kind: str) -> spaces.Space:
    """A space of each kind (Dict and Tuple ones hold the flat kinds)."""
    if kind == "box":
        return spaces.Box(-10.0, 10.0, (3,), np.float32)
    if kind == "image":
        return spaces.Box(0, 255, (8, 6, 3), np.uint8)
    if kind == "discrete":
        return spaces.Discrete(5)
    if kind == "multidiscrete":
        return spaces.MultiDiscrete([3, 4])
    if kind == "multibinary":
        return spaces.MultiBinary(4)
    if kind == "dict":
        return spaces.Dict({"pos": make_space("box"), "flag": make_space("discrete"), "bits": make_space("multibinary")})
    if kind == "tuple":
        return spaces.Tuple((make_space("multidiscrete"), make_space("box")))
    raise ValueError(f"unknown kind {kind!r}")


def value_of(space: spaces.Space, x: float, t: int) -> Any:
    """A deterministic value of ``space`` from a number and a step count."""
    if isinstance(space, spaces.Box) and space.shape != (3,):
        return np.full(space.shape, (t * 31 + int(abs(x) * 100)) % 256, dtype=space.dtype)
    if isinstance(space, spaces.Box):
        return np.clip(np.array([x, t, x * t % 3], dtype=space.dtype), space.low, space.high)
    if isinstance(space, spaces.Discrete):
        return np.int64((t + int(abs(x) * 10)) % space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array([(t + int(abs(x) * 10) + k) % n for k, n in enumerate(space.nvec)], dtype=space.dtype)
    if isinstance(space, spaces.MultiBinary):
        return np.array([(t >> k) & 1 for k in range(space.n)], dtype=space.dtype)
    if isinstance(space, spaces.Dict):
        return {key: value_of(sub, x, t) for key, sub in space.spaces.items()}
    return tuple(value_of(sub, x, t) for sub in space.spaces)


def digest(action: Any) -> float:
    """One number from an action of any space (so the dynamics depend on every part of it)."""
    if isinstance(action, dict):
        return sum(digest(action[key]) for key in sorted(action))
    if isinstance(action, (tuple, list)):
        return sum((k + 1) * digest(part) for k, part in enumerate(action))
    return float(np.sum(np.asarray(action, dtype=np.float64)))


class SpaceEnv(gym.Env):
    """An env over the spaces ``make_space(obs)`` and ``make_space(act)``: deterministic given its seed, episodes of 2 to
    6 steps ending terminated, truncated or both, infos sometimes empty, a reset option ``start``.

    :param index: which env of a vector env this is (its methods report it)
    :param shared_info: return the same info dict at every step (an env that reuses its info)
    :param scalar_infos: infos of numbers only, of every scalar type (a MuJoCo or Atari env's kind), whose keys change
        now and then, sometimes empty
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 7}

    def __init__(
        self,
        obs: str = "box",
        act: str = "box",
        index: int = 0,
        render_mode: str | None = None,
        shared_info: bool = False,
        scalar_infos: bool = False,
    ):
        self.observation_space, self.action_space = make_space(obs), make_space(act)
        self.index, self.render_mode, self.shared_info, self.scalar_infos = index, render_mode, shared_info, scalar_infos
        self.marker = 0
        self.x, self.t, self.length = 0.0, 0, 3
        self._info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(2, 7))
        self.x = float(self.np_random.uniform(-1, 1)) + float((options or {}).get("start", 0.0))
        info = {} if self.length == 3 else {"length": self.length, "start": np.array([self.x, self.index])}
        return value_of(self.observation_space, self.x, self.t), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), f"{action!r} not in {self.action_space}"
        self.t += 1
        d = digest(action)
        self.x = float(np.tanh(self.x + 0.1 * d + 0.01 * self.np_random.normal()))
        reward = self.x + 0.5 * d
        ended = self.t >= self.length
        terminated = ended and self.length % 2 == 0  # 2, 4 and 6 steps end terminated, 3 and 5 truncated
        truncated = ended and (self.length % 2 == 1 or self.length == 6)  # 6: both
        if self.scalar_infos:
            info = scalar_info(self.t, self.x, d, self.index)
        elif self.t % 3 == 0:
            info = {}
        else:
            info = {"t": self.t, "d": d, "vec": np.arange(2) * self.t}
        if ended:
            info["ended_at"] = self.t
        if self.shared_info:
            self._info.clear()
            self._info.update(info)
            info = self._info
        return value_of(self.observation_space, self.x, self.t), reward, terminated, truncated, info

    def render(self) -> np.ndarray:
        return np.full((4, 6, 3), (self.t * 40 + self.index) % 255, dtype=np.uint8)

    def describe(self, scale: int = 1, *, offset: int = 0) -> tuple[int, int, int, int]:
        """What a method call sees: this env's index, marker and step count."""
        return self.index, self.marker, self.t * scale + offset, self.length


def scalar_info(t: int, x: float, d: float, index: int) -> dict[str, Any]:
    """An info of numbers of every scalar type numpy and Python have, its keys depending on ``t`` and ``index``."""
    if (t + index) % 5 == 0:
        return {}
    info: dict[str, Any] = {
        "x": np.float64(x),
        "d": np.float32(d),
        "half": np.float16(x),
        "t": t,
        "big": 2**62 + t,
        "f": float(d),
        "ok": bool(d > 0),
        "flag": np.bool_(x > 0),
        "i64": np.int64(-t),
        "i32": np.int32(t * 7),
        "i16": np.int16(-t),
        "i8": np.int8(t),
        "u64": np.uint64(2**63 + t),
        "u32": np.uint32(t),
        "u16": np.uint16(t),
        "u8": np.uint8(t),
    }
    if t % 4 == 0:
        info["extra"] = np.float64(-x)
    return info


class Tagged(gym.Wrapper):
    """A wrapper with an attribute of its own (``tag``), to tell where ``set_attr`` writes."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.tag = "outer"


def space_env_factories(n: int, obs: str = "box", act: str = "box", **kwargs: Any) -> list:
    """``n`` factories of :class:`SpaceEnv` (indexes 0..n-1), each wrapped in :class:`Tagged`."""
    return [functools.partial(_tagged_space_env, obs, act, k, kwargs) for k in range(n)]


def _tagged_space_env(obs: str, act: str, index: int, kwargs: dict[str, Any]) -> gym.Env:
    return Tagged(SpaceEnv(obs, act, index, **kwargs))
