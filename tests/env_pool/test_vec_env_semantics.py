"""AsyncEnvPool.as_vec_env() side by side with SB3's DummyVecEnv on the same envs and seeds: every space SB3's VecEnvs
support, episode ends, infos, reset infos, seeds and options, the ``indices`` forms, rendering and SB3's VecEnv
wrappers. Where the pool cannot behave as DummyVecEnv, the test checks its error."""

from __future__ import annotations

import re
import sys
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

from sb3_async import AsyncEnvPool
from sb3_async.env_pool import EnvError
from tests.space_envs import KINDS, SpaceEnv, Tagged, assert_same, space_env_factories

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_ENVS = 3
#: Where the envs step: two worker processes, this process only, one worker and one env here.
LAYOUTS = [{"n_hosts": 2}, {"n_hosts": 0}, {"n_hosts": 1, "local_envs": 1}]


def batch_of_actions(space: spaces.Space, rng_space: spaces.Space, n: int) -> Any:
    """``n`` sampled actions as SB3 hands them to a VecEnv: one array for the flat spaces, a list otherwise."""
    samples = [rng_space.sample() for _ in range(n)]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return samples
    return np.stack([np.asarray(sample) for sample in samples])


def run_side_by_side(ours: VecEnv, theirs: VecEnv, steps: int, seed: int = 0) -> int:
    """Seed, set options, reset and step both with the same actions; returns how many episodes ended."""
    sampler = ours.action_space
    sampler.seed(seed)
    for venv in (ours, theirs):
        assert venv.seed(5) == list(range(5, 5 + N_ENVS))
        venv.set_options([{"start": 1.0}, {}, {"start": -1.0}])
    assert_same(ours.reset(), theirs.reset(), "reset obs")
    assert_same(ours.reset_infos, theirs.reset_infos, "reset_infos")
    kept_ours, kept_theirs, ends = [], [], 0
    for t in range(steps):
        actions = batch_of_actions(ours.action_space, sampler, N_ENVS)
        a, b = ours.step(actions), theirs.step(actions)
        assert_same(a[0], b[0], f"step {t} obs")
        assert_same(a[1], b[1], f"step {t} rewards")  # float32, as DummyVecEnv's
        assert_same(a[2], b[2], f"step {t} dones")
        assert_same(a[3], b[3], f"step {t} infos")
        assert_same(ours.reset_infos, theirs.reset_infos, f"step {t} reset_infos")
        kept_ours.append(a[3])
        kept_theirs.append(b[3])
        ends += int(b[2].sum())
    assert_same(kept_ours, kept_theirs, "the infos kept from every step")  # no info is reused by a later step
    for venv in (ours, theirs):  # a second seeded reset, no options this time
        venv.seed(11)
    assert_same(ours.reset(), theirs.reset(), "second reset obs")
    assert_same(ours.reset_infos, theirs.reset_infos, "second reset_infos")
    actions = batch_of_actions(ours.action_space, sampler, N_ENVS)
    assert_same(ours.step(actions)[:3], theirs.step(actions)[:3], "step after the second reset")
    return ends


@pytest.mark.parametrize("obs, act", [(kind, kind) for kind in KINDS] + [("image", "tuple"), ("tuple", "dict")])
def test_the_pool_gives_dummy_vec_env_transitions_for_every_space(obs, act):
    kwargs = {"shared_info": obs in ("box", "tuple", "image")}  # envs that reuse their info dict, and envs that do not
    for layout in LAYOUTS:
        reference = DummyVecEnv(space_env_factories(N_ENVS, obs, act, **kwargs))
        with AsyncEnvPool(space_env_factories(N_ENVS, obs, act, **kwargs), **layout) as pool:
            venv = pool.as_vec_env()
            assert venv.observation_space == reference.observation_space
            assert venv.action_space == reference.action_space
            ends = run_side_by_side(venv, reference, steps=25)
            assert ends >= 10, "the episodes should end several times (terminated, truncated, both)"
        reference.close()


def test_every_end_kind_sets_terminal_observation_and_time_limit_truncated():
    """Terminated only, truncated only, both: ``TimeLimit.truncated`` is ``truncated and not terminated`` in each."""
    with AsyncEnvPool(space_env_factories(N_ENVS), n_hosts=2) as pool:
        venv, reference = pool.as_vec_env(), DummyVecEnv(space_env_factories(N_ENVS))
        for v in (venv, reference):
            v.seed(0)
            v.reset()
        seen = set()
        for _ in range(60):
            actions = np.zeros((N_ENVS, 3), np.float32)
            (*_, infos), (*_, expected) = venv.step(actions), reference.step(actions)
            assert_same(infos, expected)
            lengths = venv.get_attr("length")
            for info in infos:
                if "terminal_observation" in info:
                    seen.add((info["ended_at"] % 2 == 0, info["ended_at"], info["TimeLimit.truncated"]))
        assert {(ended, truncated) for ended, _, truncated in seen} >= {(True, False), (False, True)}
        assert any(length == 6 for _, length, _ in seen), "an episode ended terminated and truncated at once"
        assert len(lengths) == N_ENVS


INDICES = [None, 1, [0, 2], (2,), range(1, 3), [0, -1], [-3], np.array([2, 0]), np.arange(3)[::-1], [1, 1, 0], []]


@pytest.fixture(scope="module")
def pair():
    """A pool of 3 envs in 2 workers (as a VecEnv) and a DummyVecEnv of the same envs, shared by the tests below."""
    pool = AsyncEnvPool(space_env_factories(N_ENVS, render_mode="rgb_array"), n_hosts=2)
    venv, reference = pool.as_vec_env(), DummyVecEnv(space_env_factories(N_ENVS, render_mode="rgb_array"))
    for v in (venv, reference):
        v.seed(3)
        v.reset()
    yield venv, reference
    venv.close()
    reference.close()


def both(pair, call):
    """``call(venv)`` on both VecEnvs: the same result, or the same exception type (returned)."""
    results = []
    for venv in pair:
        try:
            results.append(call(venv))
        except Exception as error:
            results.append(error)
    ours, theirs = results
    if isinstance(theirs, Exception):
        assert type(ours) is type(theirs), f"{ours!r} vs DummyVecEnv's {theirs!r}"
        return ours
    assert_same(ours, theirs)
    return ours


@pytest.mark.parametrize("indices", INDICES, ids=repr)
def test_indices_forms_reach_the_envs_dummy_vec_env_reaches(pair, indices):
    both(pair, lambda v: v.env_method("describe", 2, indices=indices, offset=1))
    both(pair, lambda v: v.get_attr("index", indices))
    both(pair, lambda v: v.env_is_wrapped(Tagged, indices))
    both(pair, lambda v: v.env_is_wrapped(gym.wrappers.TimeLimit, indices))
    both(pair, lambda v: v.set_attr("marker", 7, indices))
    both(pair, lambda v: v.env_method("describe"))
    both(pair, lambda v: v.get_attr("marker"))
    both(pair, lambda v: v.set_attr("marker", 0))


@pytest.mark.parametrize("indices", [3, -4, [0, 3], [-4], range(2, 5), np.array([5])], ids=repr)
def test_out_of_range_indices_raise_index_error_as_dummy_vec_env(pair, indices):
    venv, _ = pair
    for call in (
        lambda v: v.env_method("describe", indices=indices),
        lambda v: v.get_attr("index", indices),
        lambda v: v.set_attr("marker", 1, indices),
        lambda v: v.env_is_wrapped(Tagged, indices),
    ):
        error = both(pair, call)
        assert isinstance(error, IndexError)
    with pytest.raises(IndexError, match=re.escape(f"indices={indices!r}")):
        venv.get_attr("index", indices)
    assert venv.get_attr("marker") == [0, 0, 0], "nothing was set by a call that raised"


def test_indices_of_other_types_raise_type_error(pair):
    venv, reference = pair
    for indices in (1.0, np.int64(1), slice(0, 2), ["0"]):  # DummyVecEnv raises TypeError for each too
        assert isinstance(both(pair, lambda v, indices=indices: v.get_attr("index", indices)), TypeError)
    # DummyVecEnv takes True as index 1 (a list index); the pool refuses a bool, a likely mistake
    assert reference.get_attr("index", True) == [1]
    with pytest.raises(TypeError, match="Invalid env index True"):
        venv.get_attr("index", True)


def test_set_attr_sets_the_outermost_wrapper_as_dummy_vec_env(pair):
    """SB3's VecEnvs ``setattr`` on the env they hold: an inner env's attribute is shadowed by the wrapper's, not
    changed (gymnasium's vector envs differ: tests/env_pool/test_gym_vector_env.py)."""
    both(pair, lambda v: v.set_attr("marker", 5, indices=[1]))
    assert both(pair, lambda v: v.get_attr("marker")) == [0, 5, 0]  # found on the wrapper first
    assert [d[1] for d in both(pair, lambda v: v.env_method("describe"))] == [0, 0, 0]  # the inner env's is unchanged
    both(pair, lambda v: v.set_attr("tag", "set", indices=0))
    assert both(pair, lambda v: v.get_attr("tag")) == ["set", "outer", "outer"]
    both(pair, lambda v: v.set_attr("brand_new", 1))
    assert both(pair, lambda v: v.has_attr("brand_new")) is True
    for v in pair:
        for name in ("marker", "brand_new"):
            v.env_method("__delattr__", name, indices=[0, 1, 2] if name == "brand_new" else [1])
        v.set_attr("tag", "outer", 0)
    assert both(pair, lambda v: v.get_attr("marker")) == [0, 0, 0]


def test_has_attr_get_attr_and_env_method_errors(pair):
    venv, _ = pair
    assert both(pair, lambda v: v.has_attr("marker")) is True
    assert both(pair, lambda v: v.has_attr("no_such_thing")) is False
    assert isinstance(both(pair, lambda v: v.get_attr("no_such_thing")), AttributeError)
    # DummyVecEnv lets the env's exception through; the pool reports it as EnvError naming the env, with its traceback
    with pytest.raises(EnvError, match=r"(?s)Env 0 of the AsyncEnvPool raised in call\('no_such_method'\).*AttributeError"):
        venv.env_method("no_such_method")
    with pytest.raises(AttributeError):
        pair[1].env_method("no_such_method")


def test_render_and_get_images_as_dummy_vec_env(pair):
    venv, reference = pair
    assert venv.render_mode == reference.render_mode == "rgb_array"
    assert venv.metadata == reference.metadata  # env 0's metadata, render_fps included (VecVideoRecorder reads it)
    actions = np.zeros((N_ENVS, 3), np.float32)
    for _ in range(2):
        both(pair, lambda v: v.step(actions)[:3])
        images = both(pair, lambda v: v.get_images())
        assert len(images) == N_ENVS and images[0].shape == (4, 6, 3)
        both(pair, lambda v: v.render())
        both(pair, lambda v: v.render(mode="rgb_array"))


def test_get_images_without_rgb_array_warns_as_dummy_vec_env():
    with AsyncEnvPool(space_env_factories(2), n_hosts=0) as pool:
        venv = pool.as_vec_env()
        with pytest.warns(UserWarning, match="rgb_array"):
            assert venv.get_images() == [None, None]
        with pytest.warns(UserWarning, match="no `render_mode`"):
            assert venv.render() is None


def test_seed_none_and_set_options_dict_as_dummy_vec_env():
    with AsyncEnvPool(space_env_factories(N_ENVS), n_hosts=1, local_envs=1) as pool:
        venv, reference = pool.as_vec_env(), DummyVecEnv(space_env_factories(N_ENVS))
        seeds = venv.seed(None)  # random, then seed + i
        assert seeds == list(range(seeds[0], seeds[0] + N_ENVS))
        reference.seed(seeds[0])
        for v in (venv, reference):
            v.set_options({"start": 2.0})
        assert_same(venv.reset(), reference.reset())
        assert_same(venv.reset_infos, reference.reset_infos)
        assert all(info["start"][0] > 0.9 for info in venv.reset_infos if info)  # the option reached every env
        # seeds and options serve one reset only, as in DummyVecEnv
        venv.reset()
        reference.reset()
        assert venv._seeds == reference._seeds == [None] * N_ENVS
        assert all(not info or info["start"][0] < 1.0 for info in venv.reset_infos)


def test_out_of_bounds_box_actions_raise_a_clear_error():
    """DummyVecEnv hands any action to the env; the pool checks them against the action space (its shared buffers hold
    that space's dtype) and names the env."""
    with AsyncEnvPool(space_env_factories(2), n_hosts=0) as pool:
        venv = pool.as_vec_env()
        venv.reset()
        with pytest.raises(ValueError, match="for env 1: not in the action space"):
            venv.step(np.array([[0, 0, 0], [0, 0, 99]], np.float32))
        with pytest.raises(ValueError, match=r"Invalid actions of shape \(3, 3\)"):
            venv.step(np.zeros((3, 3), np.float32))
        venv.step(np.zeros((2, 3), np.float32))  # the env is fine after refused actions


def test_tuple_and_dict_actions_are_checked_per_env():
    with AsyncEnvPool(space_env_factories(2, "box", "tuple"), n_hosts=0) as pool:
        venv = pool.as_vec_env()
        venv.reset()
        good = venv.action_space.sample()
        bad = (np.array([9, 0]), good[1])
        with pytest.raises(ValueError, match="for env 1"):
            venv.step([good, bad])
        with pytest.raises(ValueError, match=r"1 given, expected one per env \(2\)"):
            venv.step([good])
    with AsyncEnvPool(space_env_factories(2, "box", "dict"), n_hosts=0) as pool:
        venv = pool.as_vec_env()
        venv.reset()
        good = venv.action_space.sample()
        with pytest.raises(ValueError, match="for env 0"):
            venv.step([{**good, "flag": 7}, good])


@pytest.mark.parametrize(
    "obs, wrap, n_hosts",
    [
        ("box", lambda v: VecNormalize(v, gamma=0.9), 2),
        ("box", lambda v: VecFrameStack(v, 3), 2),
        ("dict", lambda v: VecNormalize(v, norm_obs_keys=["pos"]), 2),
        # VecMonitor asks env_is_wrapped(Monitor): unpickling SB3's Monitor imports SB3 and torch in each worker
        # process (seconds on a busy machine), so its envs step here; its infos["episode"] are compared too
        ("tuple", VecMonitor, 0),
        ("image", lambda v: VecFrameStack(VecTransposeImage(v), 2), 2),
    ],
    ids=["VecNormalize", "VecFrameStack", "VecNormalize-dict", "VecMonitor-tuple", "VecTransposeImage"],
)
def test_sb3_vec_env_wrappers_give_the_same_outputs(obs, wrap, n_hosts):
    pool = AsyncEnvPool(space_env_factories(N_ENVS, obs), n_hosts=n_hosts)
    ours, theirs = wrap(pool.as_vec_env()), wrap(DummyVecEnv(space_env_factories(N_ENVS, obs)))
    try:
        ends = run_side_by_side(ours, theirs, steps=20)
        assert ends >= 5
    finally:
        ours.close()
        theirs.close()
    assert pool.closed


def test_space_env_is_deterministic_given_its_seed():
    """The comparisons above mean something only if the envs are reproducible and their episodes vary."""
    lengths = set()
    for seed in range(10):
        a, b = SpaceEnv(), SpaceEnv()
        assert_same(a.reset(seed=seed), b.reset(seed=seed))
        lengths.add(a.length)
        for _ in range(4):
            action = np.full(3, 0.3, np.float32)
            assert_same(a.step(action), b.step(action))
    assert len(lengths) >= 3


def test_infos_of_numbers_travel_packed_and_arrive_as_dummy_vec_envs():
    """Infos of scalars only (MuJoCo's, Atari's) skip pickling between a worker and the pool: the same values of the
    same types as DummyVecEnv's, keys changing between steps, episode ends included. The envs reuse their info dict:
    those stepped in this process have theirs copied (a shallow copy suffices for numbers)."""
    kwargs = {"scalar_infos": True, "shared_info": True}
    for layout in LAYOUTS:
        reference = DummyVecEnv(space_env_factories(N_ENVS, **kwargs))
        with AsyncEnvPool(space_env_factories(N_ENVS, **kwargs), **layout) as pool:
            ends = run_side_by_side(pool.as_vec_env(), reference, steps=30)
            assert ends >= 10
            if pool.n_hosts:
                unpackers = pool.hosts._unpackers  # type: ignore[union-attr]
                assert all(len(unpacker._schemas) >= 2 for unpacker in unpackers), "the packed path was not taken"
        reference.close()
