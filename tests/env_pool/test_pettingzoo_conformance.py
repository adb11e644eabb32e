"""PettingZoo's own test utilities (``pettingzoo.test``) on AsyncEnvPool with ``autoreset=False`` (PettingZoo's
semantics: a slot that ended leaves ``agents`` until ``reset``), each run across episode ends: ``parallel_api_test``,
``parallel_seed_test`` and ``max_cycles_test``, on pools of CartPole copies and of multi-agent envs (MPE's
simple_spread, butterfly's pistonball and knights_archers_zombies), where each (env copy, agent) is one slot.

Every test counts the episode ends the pool reported, so that none passes without crossing one."""

from __future__ import annotations

import functools
import types
from collections import Counter
from typing import Any

import numpy as np
import pytest

pettingzoo_test = pytest.importorskip("pettingzoo.test", reason="pettingzoo is optional: the [pettingzoo] extra")
from pettingzoo.utils.conversions import parallel_to_aec  # noqa: E402

from sb3_async.env_pool import AsyncEnvPool  # noqa: E402


class EndCountingPool(AsyncEnvPool):
    """An AsyncEnvPool that records how many actions each step got and how many slot episodes it ended (a subclass:
    ``parallel_api_test`` refuses PettingZoo wrappers)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.step_sizes: list[int] = []
        self.ends = 0

    def step(self, actions: dict[int, Any]) -> Any:
        result = super().step(actions)
        terminations, truncations = result[2], result[3]
        self.step_sizes.append(len(actions))
        self.ends += sum(terminations[i] or truncations[i] for i in terminations)
        return result


def simple_spread(max_cycles: int) -> Any:
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    return functools.partial(simple_spread_v3.parallel_env, max_cycles=max_cycles)


def pistonball(max_cycles: int) -> Any:
    pytest.importorskip("pymunk")
    from pettingzoo.butterfly import pistonball_v6

    return functools.partial(pistonball_v6.parallel_env, n_pistons=3, max_cycles=max_cycles)


# ---------------------------------------------------------------------------------------------------- parallel_api_test
def test_parallel_api_test_on_cartpole_copies():
    """CartPole-v1 is truncated at 500 steps, so with num_cycles=500 every copy's episode ends inside each of the
    utility's two resets; the copies end at different steps, the others stepping on meanwhile."""
    with EndCountingPool("CartPole-v1", n_envs=3, n_hosts=1, local_envs=1, autoreset=False) as pool:
        pool.action_space(0).seed(0)
        pettingzoo_test.parallel_api_test(pool, num_cycles=500)
        assert pool.ends == 2 * 3 and pool.agents == []
        assert {1, 2} <= set(pool.step_sizes), "no copy ended while the others stepped on"


def test_parallel_api_test_on_simple_spread_copies():
    """Two copies of MPE's simple_spread (3 agents: 6 slots), truncated at 10 and at 25 cycles: copy 0's 3 slots leave
    at step 10 while copy 1's step on to 25, in each of the utility's two resets."""
    pytest.importorskip("mpe2")
    with EndCountingPool([simple_spread(10), simple_spread(25)], n_hosts=1, local_envs=1, autoreset=False) as pool:
        assert pool.n_envs == 6
        pettingzoo_test.parallel_api_test(pool, num_cycles=30)
        assert pool.ends == 2 * 6 and pool.agents == []
        assert pool.step_sizes == ([6] * 10 + [3] * 15) * 2


def test_parallel_api_test_on_pistonball_copies():
    """Butterfly's pistonball (image observations, continuous actions), 3 pistons per copy, episodes of at most 8 and
    12 cycles (or fewer, when the ball reaches the wall)."""
    with EndCountingPool([pistonball(8), pistonball(12)], n_hosts=1, autoreset=False) as pool:
        assert pool.n_envs == 6 and pool.observation_space(0).shape == (457, 120, 3)
        pettingzoo_test.parallel_api_test(pool, num_cycles=20)
        assert pool.ends == 2 * 6 and pool.agents == []
        assert 3 in pool.step_sizes, "no copy ended while the other stepped on"


def test_parallel_api_test_with_agents_killed_before_the_others():
    """Butterfly's knights_archers_zombies: zombies kill knights and archers while the others play on, so slots leave
    ``agents`` one by one, not a whole copy at once."""
    pytest.importorskip("pygame")
    from pettingzoo.butterfly import knights_archers_zombies_v11 as kaz

    factory = functools.partial(kaz.parallel_env, obs_method="vector", max_cycles=300, spawn_delay=2, max_zombies=12)
    with EndCountingPool(factory, n_envs=2, n_hosts=1, autoreset=False) as pool:
        assert pool.agents_per_env == 4
        pool.action_space(0).seed(0)
        pettingzoo_test.parallel_api_test(pool, num_cycles=300)
        assert pool.ends == 2 * 8 and pool.agents == []
        partial = [size for size in pool.step_sizes if size % 4]
        assert partial, f"no agent was killed before the others of its copy: {Counter(pool.step_sizes)}"


# ---------------------------------------------------------------------------------------------------- parallel_seed_test
class Pools:
    """Builds pools for the utilities that build their own envs, and closes them all at the end of the test."""

    def __init__(self, *args: Any, **kwargs: Any):
        self.args, self.kwargs = args, kwargs
        self.built: list[EndCountingPool] = []

    def __call__(self, **kwargs: Any) -> EndCountingPool:
        self.built.append(EndCountingPool(*self.args, **{**self.kwargs, **kwargs}))
        return self.built[-1]

    def __enter__(self) -> Pools:
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in self.built:
            pool.close()


def test_parallel_seed_test_on_a_cartpole_pool():
    """A pool of one CartPole env: the utility steps both pools, seeded alike, until the episode ends (its loop runs
    ``while env.agents``)."""
    with Pools("CartPole-v1", n_envs=1, n_hosts=0, autoreset=False) as pools:
        pettingzoo_test.parallel_seed_test(pools)
        assert len(pools.built) == 2 and all(pool.closed for pool in pools.built)
        ends, lengths = {pool.ends for pool in pools.built}, {len(pool.step_sizes) for pool in pools.built}
        assert ends == {1} and len(lengths) == 1 and lengths.pop() > 5


@pytest.mark.parametrize("make", [simple_spread, pistonball])
def test_parallel_seed_test_on_multi_agent_pools(make):
    """The utility's loop breaks on ``any(terminations)``, which tests the dict's keys (the slot ids 0..5, truthy
    beyond 0), so it compares the reset and one step only; the trajectories across episode ends are compared below."""
    with Pools([make(5), make(8)], n_hosts=1, autoreset=False) as pools:
        pettingzoo_test.parallel_seed_test(pools)
        assert [len(pool.step_sizes) for pool in pools.built] == [1, 1]


def _without_time(info: dict) -> dict:
    """``info`` without the wall-clock seconds of its ``"episode"`` statistics (never reproducible)."""
    if "episode" not in info:
        return info
    return {**info, "episode": {key: value for key, value in info["episode"].items() if key != "t"}}


def test_seeded_multi_agent_pools_repeat_across_episode_ends():
    """What parallel_seed_test checks, through whole episodes: two pools reset with the same seed and given the same
    actions return equal observations, rewards, flags and infos (but the seconds in ``info["episode"]``), through
    each copy's episode end, and again after a reset with the same seed."""
    pytest.importorskip("mpe2")
    from gymnasium.utils.env_checker import data_equivalence

    with Pools([simple_spread(5), simple_spread(8)], n_hosts=1, autoreset=False) as pools:
        one, two = pools(), pools(n_hosts=0)
        for _ in range(2):
            first = [one.reset(seed=42), two.reset(seed=42)]
            assert data_equivalence(first[0], first[1])
            rng = np.random.default_rng(0)
            while one.agents:
                assert one.agents == two.agents
                actions = {i: int(rng.integers(5)) for i in one.agents}
                (obs1, rew1, term1, trunc1, info1), (obs2, rew2, term2, trunc2, info2) = one.step(actions), two.step(actions)
                assert data_equivalence((obs1, rew1, term1, trunc1), (obs2, rew2, term2, trunc2))
                assert data_equivalence(
                    {i: _without_time(info) for i, info in info1.items()},
                    {i: _without_time(info) for i, info in info2.items()},
                )
            assert one.ends == two.ends and one.step_sizes == two.step_sizes == [6] * 5 + [3] * 3
            one.step_sizes.clear()
            two.step_sizes.clear()
        assert one.ends == 2 * 6


# ---------------------------------------------------------------------------------------------------- max_cycles_test
def test_max_cycles_test_on_simple_spread_pools():
    """``max_cycles_test(module)`` builds ``module.parallel_env(max_cycles=4)`` and ``module.env(max_cycles=4)`` (an
    AEC env: the pool through PettingZoo's ``parallel_to_aec``) and checks that the episode ends after 4 cycles, each
    agent acting 4 times, then once more for its dead step. simple_spread's episodes end only at max_cycles; the
    utility cannot seed its envs, so an env whose episodes may end sooner (pistonball's ball reaching the wall) would
    fail it by chance."""
    make = simple_spread
    with Pools(n_envs=2, n_hosts=1, autoreset=False) as pools:

        def parallel_env(max_cycles: int) -> EndCountingPool:
            pools.args = (make(max_cycles),)
            return pools()

        module = types.SimpleNamespace(
            parallel_env=parallel_env, env=lambda max_cycles: parallel_to_aec(parallel_env(max_cycles))
        )
        pettingzoo_test.max_cycles_test(module)
        assert [(pool.ends, len(pool.step_sizes)) for pool in pools.built] == [(6, 4), (6, 4)]
        assert all(pool.agents == [] for pool in pools.built)
