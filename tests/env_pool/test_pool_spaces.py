"""Every gymnasium observation space through the env pool: Text, Graph, Sequence, OneOf, Dicts and Tuples nested at
any depth and a custom ``Space``, in worker processes (their non-array parts travel pickled with the reply), in this
process, and on Ray. The gymnasium view gives what gymnasium's ``SyncVectorEnv`` gives for the same envs, seeds and
actions, in both autoreset modes; SB3's view refuses what SB3 cannot take, naming the view that can."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from sb3_async import AsyncEnvPool

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers never import this test module


class Odd(spaces.Space):
    """A custom space: dicts holding an odd number (no shape, no dtype)."""

    def __init__(self, seed: int | None = None):
        super().__init__(None, None, seed)

    def sample(self, mask: Any = None, probability: Any = None) -> dict[str, int]:
        return {"odd": int(self.np_random.integers(50)) * 2 + 1}

    def contains(self, x: Any) -> bool:
        return isinstance(x, dict) and isinstance(x.get("odd"), int) and x["odd"] % 2 == 1

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Odd)


def make_space(kind: str) -> spaces.Space:
    if kind == "text":
        return spaces.Text(8)
    if kind == "graph":
        return spaces.Graph(spaces.Box(0, 1, (2,), np.float32), spaces.Discrete(3))
    if kind == "sequence":
        return spaces.Sequence(spaces.Discrete(4))
    if kind == "stacked_sequence":
        return spaces.Sequence(spaces.Box(-1, 1, (2,), np.float32), stack=True)
    if kind == "oneof":
        return spaces.OneOf((spaces.Discrete(2), spaces.Box(0, 1, (3,), np.float32)))
    if kind == "custom":
        return Odd()
    if kind == "nested_arrays":  # arrays only, three levels deep: all in the shared buffers
        inner = spaces.Dict({"pos": spaces.Box(-1, 1, (2,), np.float32), "flag": spaces.MultiBinary(3)})
        return spaces.Dict({"a": spaces.Tuple((inner, spaces.Discrete(4))), "b": spaces.MultiDiscrete([2, 5])})
    if kind == "mixed":  # arrays and objects at several depths
        return spaces.Dict(
            {
                "text": spaces.Text(6),
                "inner": spaces.Dict(
                    {"pos": spaces.Box(-1, 1, (2,), np.float32), "t": spaces.Tuple((spaces.Discrete(3), Odd()))}
                ),
                "graph": make_space("graph"),
            }
        )
    raise ValueError(kind)


KINDS = ["text", "graph", "sequence", "stacked_sequence", "oneof", "custom", "nested_arrays", "mixed"]


class SpaceEnv(gym.Env):
    """Observations sampled from ``space`` (seeded by ``reset``); episodes of ``length`` steps, the last one truncated
    when ``length`` is even; reward the action."""

    def __init__(self, kind: str, length: int):
        self.observation_space, self.action_space = make_space(kind), spaces.Discrete(2)
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {"t": self.t}

    def pid(self) -> int:
        return os.getpid()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        end = self.t >= self.length
        return self.observation_space.sample(), float(action), end and self.length % 2 == 1, end and self.length % 2 == 0, {}


def factories(kind: str, n: int) -> list:
    return [lambda length=3 + i: SpaceEnv(kind, length) for i in range(n)]


def assert_equal(ours: Any, theirs: Any, path: str = "obs") -> None:
    """The same value, batch or info, down to the leaves (arrays of the same dtype, strings, graphs)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and list(ours) == list(theirs), f"{path}: {ours!r} != {theirs!r}"
        for key in theirs:
            assert_equal(ours[key], theirs[key], f"{path}[{key!r}]")
    elif isinstance(theirs, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(theirs), f"{path}: {ours!r} != {theirs!r}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_equal(a, b, f"{path}[{k}]")
    elif isinstance(theirs, spaces.GraphInstance):
        assert isinstance(ours, spaces.GraphInstance), f"{path}: {type(ours)}"
        for field in ("nodes", "edges", "edge_links"):
            assert_equal(getattr(ours, field), getattr(theirs, field), f"{path}.{field}")
    elif isinstance(theirs, np.ndarray) and theirs.dtype == object:
        assert isinstance(ours, np.ndarray) and ours.shape == theirs.shape, f"{path}: {ours!r}"
        for k, (a, b) in enumerate(zip(ours, theirs)):
            assert_equal(a, b, f"{path}[{k}]")
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.dtype == theirs.dtype, f"{path}: {ours!r} != {theirs!r}"
        np.testing.assert_array_equal(ours, theirs, err_msg=path)
    else:
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


def race(ours: gym.vector.VectorEnv, theirs: gym.vector.VectorEnv, steps: int = 10) -> int:
    """Step both alike; every result equal. Returns how many episodes ended."""
    assert_equal(ours.reset(seed=7), theirs.reset(seed=7), "reset")
    ends = 0
    for t in range(steps):
        actions = np.array([(t + i) % 2 for i in range(theirs.num_envs)])
        mine, reference = ours.step(actions), theirs.step(actions)
        assert_equal(mine, reference, f"step {t}")
        assert ours.observation_space.contains(mine[0]), f"step {t}: {mine[0]!r} not in {ours.observation_space}"
        ends += int(np.sum(reference[2] | reference[3]))
    return ends


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("kind", KINDS)
def test_gym_view_gives_what_sync_vector_env_gives(kind: str, mode: AutoresetMode) -> None:
    """Two worker processes: the values that are not arrays travel with the replies, the arrays stay shared."""
    theirs = SyncVectorEnv(factories(kind, 3), autoreset_mode=mode)
    with AsyncEnvPool(factories(kind, 3), n_hosts=2) as pool:
        ours = pool.as_gym_vector_env(mode)
        assert ours.single_observation_space == theirs.single_observation_space
        assert race(ours, theirs) >= 3  # across episode ends
    theirs.close()


@pytest.mark.parametrize("layout", [dict(n_hosts=1, local_envs=2), dict(n_hosts=0, local_envs=3)])
def test_envs_in_this_process_give_the_same_values(layout: dict[str, int]) -> None:
    theirs = SyncVectorEnv(factories("mixed", 3), autoreset_mode=AutoresetMode.SAME_STEP)
    with AsyncEnvPool(factories("mixed", 3), **layout) as pool:
        assert race(pool.as_gym_vector_env("SameStep"), theirs) >= 3
    theirs.close()


def test_parallel_env_view_and_send_recv_carry_object_values() -> None:
    """The pool's own API: ``reset``/``step`` dicts, ``send``/``recv`` in any order, and the final observation of an
    episode (same-step autoreset) in its info."""
    reference = [SpaceEnv("mixed", 3 + i) for i in range(4)]
    with AsyncEnvPool(factories("mixed", 4), n_hosts=2) as pool:
        space = pool.observation_space(0)
        obs, _ = pool.reset(seed=3)
        for i, env in enumerate(reference):
            assert_equal(obs[i], env.reset(seed=3 + i)[0], f"reset {i}")
        for t in range(6):
            pool.send({i: 1 for i in range(4)})
            got: dict[int, Any] = {}
            while len(got) < 4:
                obs, rewards, terminated, truncated, infos = pool.recv(min_ready=1)
                for i in obs:
                    expected, _, ended, cut, _ = reference[i].step(1)
                    if ended or cut:
                        assert_equal(infos[i]["final_obs"], expected, f"final obs {i}")
                        expected = reference[i].reset()[0]
                    assert_equal(obs[i], expected, f"step {t} env {i}")
                    assert space.contains(obs[i])
                    got[i] = obs[i]


def test_a_respawned_worker_reports_the_last_observation_whole() -> None:
    """on_error="restart": the episode a killed worker cut short ends with its last observation, object parts
    included (the new worker never saw them), and the next observations are the new episode's."""
    with AsyncEnvPool([lambda length=50: SpaceEnv("mixed", length)] * 2, n_hosts=2, on_error="restart") as pool:
        pool.reset(seed=0)
        before, *_ = pool.step({0: 1, 1: 1})
        os.kill(pool.call("pid", ids=[0])[0], signal.SIGKILL)
        obs, _, _, truncations, infos = pool.step({0: 1, 1: 1})
        assert truncations[0] and "SIGKILL" in infos[0]["error"]
        assert_equal(infos[0]["final_obs"], before[0], "final obs")
        assert pool.observation_space(0).contains(obs[0]) and not truncations[1]


@pytest.mark.ray
@pytest.mark.parametrize("backend", ["ray"])
def test_ray_hosts_carry_object_values(backend: str) -> None:
    pytest.importorskip("ray")
    theirs = SyncVectorEnv(factories("mixed", 2), autoreset_mode=AutoresetMode.SAME_STEP)
    with AsyncEnvPool(
        factories("mixed", 2), n_hosts=1, backend=backend, backend_kwargs={"init_kwargs": {"num_cpus": 2}}
    ) as pool:
        assert race(pool.as_gym_vector_env("SameStep"), theirs, steps=6) >= 2
    theirs.close()


def test_sb3_view_refuses_what_sb3_cannot_take_naming_the_gym_view() -> None:
    with AsyncEnvPool(factories("text", 2), n_hosts=1) as pool, pytest.raises(TypeError, match=r"Text.*as_gym_vector_env"):
        pool.as_vec_env()


class WordEnv(SpaceEnv):
    """Text actions (and a custom space's, in a Dict with a Box): the observation repeats the action's word."""

    def __init__(self) -> None:
        super().__init__("text", 100)  # no episode ends in the test: each observation answers the action
        self.action_space = spaces.Dict({"word": spaces.Text(6), "odd": Odd(), "x": spaces.Box(-1, 1, (1,), np.float32)})

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        word = f"{action['word']}{action['odd']['odd']}"[:8]
        return word, float(action["x"][0]), False, self.t >= self.length, {}


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(dict(n_hosts=2), id="processes"),
        pytest.param(dict(n_hosts=1, local_envs=1), id="local"),
        pytest.param(
            dict(n_hosts=1, backend="ray", backend_kwargs={"init_kwargs": {"num_cpus": 2}}), id="ray", marks=pytest.mark.ray
        ),
    ],
)
def test_actions_that_are_not_arrays_reach_the_envs(layout: dict[str, Any]) -> None:
    """The actions' parts that are not arrays travel with the step (the pool's API, both autoreset modes of the gym
    view, send/recv), and reach each env once, as given."""
    if layout.get("backend") == "ray":
        pytest.importorskip("ray")
    space = WordEnv().action_space
    space.seed(0)
    with AsyncEnvPool([WordEnv] * 3, **layout) as pool:
        pool.reset(seed=0)
        for t in range(4):
            actions = {i: space.sample() for i in range(3)}
            observations, rewards, *_ = pool.step(actions)
            for i, action in actions.items():
                assert observations[i] == f"{action['word']}{action['odd']['odd']}"[:8], (t, i)
                assert rewards[i] == pytest.approx(float(action["x"][0]))
        pool.reset()
        envs = pool.as_gym_vector_env("SameStep")
        for _ in range(4):
            batch = envs.action_space.sample()
            observations, rewards, *_ = envs.step(batch)
            assert observations == tuple(f"{w}{o['odd']}"[:8] for w, o in zip(batch["word"], batch["odd"]))
            np.testing.assert_allclose(rewards, batch["x"][:, 0])


class BoundedEnv(SpaceEnv):
    """Box observations whose bound is the env's own."""

    def __init__(self, high: float):
        super().__init__("text", 3)
        self.observation_space = spaces.Box(0, high, (2,), np.float32)


def test_spaces_differing_in_bounds_only_need_the_different_observation_mode() -> None:
    """As gymnasium's vector envs: the pool takes them (each env keeps its own space), "same" refuses them naming the
    mode that takes them, "different" batches them with ``batch_differing_spaces``; SB3's view refuses them."""
    from gymnasium.vector.utils import batch_differing_spaces

    from sb3_async.env_pool import SpacesDifferError

    highs = (1.0, 2.0, 3.0)
    with AsyncEnvPool([lambda high=high: BoundedEnv(high) for high in highs], n_hosts=1) as pool:
        assert [pool.observation_space(i).high[0] for i in range(3)] == list(highs)
        with pytest.raises(SpacesDifferError, match=r"not equivalent.*Box\(0.0, 2.0.*\(env 1\).*observation_mode='different'"):
            pool.as_gym_vector_env()
        with pytest.raises(SpacesDifferError, match="SB3's VecEnvs take envs of one observation space"):
            pool.as_vec_env()
        envs = pool.as_gym_vector_env(observation_mode="different")
        assert envs.observation_space == batch_differing_spaces([spaces.Box(0, high, (2,), np.float32) for high in highs])
        observations, _ = envs.reset(seed=0)
        assert observations in envs.observation_space
