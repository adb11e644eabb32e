"""Gymnasium 1.4's own vector-env tests (``tests/vector`` of its repository at v1.4.0), ported to run against
``AsyncEnvPool(...).as_gym_vector_env()`` where they run against ``SyncVectorEnv`` and ``AsyncVectorEnv``.

Each test below names the gymnasium tests whose checks it ports (several gymnasium tests check the same behaviour of
``SyncVectorEnv`` and ``AsyncVectorEnv``: one port covers them). :data:`NOT_PORTED` lists those left out and why;
:data:`PORTED` maps every other gymnasium test to its port, and ``test_every_gymnasium_vector_test_is_accounted_for``
keeps the two complete.

``SB3_ASYNC_GYM_REFERENCE=sync python -m pytest -n0 tests/env_pool/test_gymnasium_vector_tests.py`` runs the same tests against
gymnasium's ``SyncVectorEnv`` instead: every test passes there (but for one of AsyncVectorEnv's own behaviours,
skipped), which shows the ported checks are gymnasium's own.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.spaces import Box, Dict, Discrete, Graph, MultiBinary, MultiDiscrete, OneOf, Sequence, Space, Text, Tuple
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_differing_spaces, batch_space, concatenate, create_empty_array, iterate

from sb3_async import AsyncEnvPool

cloudpickle.register_pickle_by_value(sys.modules[__name__])

REFERENCE = os.environ.get("SB3_ASYNC_GYM_REFERENCE") == "sync"
NEXT, SAME, DISABLED = AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED

# ---------------------------------------------------------------------------------------------------------- accounting
#: The gymnasium tests (file::name) not ported, and why.
NOT_PORTED = {
    "test_async_vector_env.py::test_reset_timeout_async_vector_env": "AsyncVectorEnv's reset_async/reset_wait(timeout=)"
    " pending-call internals (a VectorEnv has neither)",
    "test_async_vector_env.py::test_step_timeout_async_vector_env": "AsyncVectorEnv's step_async/step_wait(timeout=)"
    " pending-call internals (a VectorEnv has neither)",
    "test_async_vector_env.py::test_reset_out_of_order_async_vector_env": "AsyncVectorEnv's pending-call internals"
    " (NoAsyncCallError/AlreadyPendingCallError between reset_async, reset_wait and step_async)",
    "test_async_vector_env.py::test_step_out_of_order_async_vector_env": "AsyncVectorEnv's pending-call internals"
    " (NoAsyncCallError/AlreadyPendingCallError between step_async, step_wait and reset_async)",
    "test_async_vector_env.py::test_custom_space_async_vector_env_shared_memory": "AsyncVectorEnv's shared_memory flag"
    " (shared_memory=True refuses a custom space)",
    "utils/test_shared_memory.py::test_shared_memory_create_read_write": "AsyncVectorEnv's shared-memory helpers"
    " (create/read/write_to_shared_memory, with its multiprocessing context); every space's values through the pool's"
    " own shared buffers: test_every_observation_space and test_every_action_space",
    "utils/test_shared_memory.py::test_custom_space": "AsyncVectorEnv's shared-memory helpers refusing a custom space"
    " (CustomSpaceError from create/read/write_to_shared_memory)",
    "utils/test_shared_memory.py::test_non_space": "AsyncVectorEnv's shared-memory helpers refusing a non-space"
    " (TypeError from create/read/write_to_shared_memory); the view's refusal: test_non_space_observation_space",
}

#: Every other gymnasium test (file::name) -> the test of this module that ports its checks.
PORTED = {
    "test_vector_env.py::test_vector_env_equal": "test_vector_env_equal",
    "test_vector_env.py::test_vector_obs_action_spaces": "test_every_action_space",
    "test_vector_env.py::test_final_obs_info": "test_final_obs_info",
    "test_vector_env.py::test_random_seeding_basics": "test_random_seeding_basics",
    "test_vector_env.py::test_random_seeds_set_at_retrieval": "test_random_seeds_set_at_retrieval",
    "test_vector_env.py::test_partial_reset": "test_partial_reset",
    "test_vector_env.py::test_partial_reset_failure": "test_partial_reset_failure",
    "test_vector_env.py::test_action_count_compatibility": "test_action_count_compatibility",
    "test_sync_vector_env.py::test_create_sync_vector_env": "test_create",
    "test_sync_vector_env.py::test_metadata_sync_vector_env": "test_metadata",
    "test_sync_vector_env.py::test_reset_sync_vector_env": "test_reset",
    "test_sync_vector_env.py::test_step_sync_vector_env": "test_step",
    "test_sync_vector_env.py::test_render_sync_vector": "test_render",
    "test_sync_vector_env.py::test_call_sync_vector_env": "test_call",
    "test_sync_vector_env.py::test_set_attr_sync_vector_env": "test_set_attr",
    "test_sync_vector_env.py::test_check_spaces_sync_vector_env": "test_check_spaces",
    "test_sync_vector_env.py::test_custom_space_sync_vector_env": "test_custom_space",
    "test_sync_vector_env.py::test_sync_vector_env_seed": "test_vector_env_seed",
    "test_sync_vector_env.py::test_sync_vector_determinism": "test_vector_determinism",
    "test_async_vector_env.py::test_create_async_vector_env": "test_create",
    "test_async_vector_env.py::test_metadata_async_vector_env": "test_metadata",
    "test_async_vector_env.py::test_reset_async_vector_env": "test_reset",
    "test_async_vector_env.py::test_render_async_vector": "test_render",
    "test_async_vector_env.py::test_step_async_vector_env": "test_step",
    "test_async_vector_env.py::test_call_async_vector_env": "test_call",
    "test_async_vector_env.py::test_set_attr_async_vector_env": "test_set_attr",
    "test_async_vector_env.py::test_copy_async_vector_env": "test_copy_and_no_copy",
    "test_async_vector_env.py::test_no_copy_async_vector_env": "test_copy_and_no_copy",
    "test_async_vector_env.py::test_already_closed_async_vector_env": "test_already_closed",
    "test_async_vector_env.py::test_check_spaces_async_vector_env": "test_check_spaces",
    "test_async_vector_env.py::test_custom_space_async_vector_env": "test_custom_space",
    "test_async_vector_env.py::test_float16_async_vector_env_shared_memory": "test_no_array_typecode_dtypes",
    "test_async_vector_env.py::test_async_vector_subenv_error": "test_subenv_error",
    "test_autoreset_mode.py::test_autoreset_next_step": "test_autoreset_next_step",
    "test_autoreset_mode.py::test_autoreset_within_step": "test_autoreset_within_step",
    "test_autoreset_mode.py::test_autoreset_disabled": "test_autoreset_disabled",
    "test_autoreset_mode.py::test_autoreset_metadata": "test_autoreset_metadata",
    "test_autoreset_mode.py::test_make_vec_autoreset": "test_make_vec_autoreset",
    "test_autoreset_mode.py::test_same_step_final_obs": "test_every_observation_space",
    "test_vector_env_info.py::test_vector_add_info": "test_vector_add_info",
    "test_vector_env_info.py::test_vector_return_info": "test_vector_return_info",
    "test_observation_mode.py::TestVectorEnvObservationModes::test_invalid_observation_mode": (
        "test_invalid_observation_mode"
    ),
    "test_observation_mode.py::TestVectorEnvObservationModes::test_obs_mode_same_different_spaces": (
        "test_obs_mode_same_different_spaces"
    ),
    "test_observation_mode.py::TestVectorEnvObservationModes::test_obs_mode_different_different_spaces": (
        "test_obs_mode_different_different_spaces"
    ),
    "test_observation_mode.py::TestVectorEnvObservationModes::test_obs_mode_different_different_shapes": (
        "test_obs_mode_different_different_shapes"
    ),
    "test_observation_mode.py::TestVectorEnvObservationModes::test_mixed_observation_spaces": (
        "test_mixed_observation_spaces"
    ),
    "test_vector_wrapper.py::test_vector_env_wrapper_inheritance": "test_vector_env_wrapper_inheritance",
    "test_vector_wrapper.py::test_vector_env_wrapper_attributes": "test_vector_env_wrapper_attributes",
    "test_vector_wrapper.py::test_vector_env_metadata": "test_vector_env_metadata",
    "utils/test_shared_memory.py::test_shared_memory_no_array_typecode_dtypes": "test_no_array_typecode_dtypes",
    "utils/test_space_utils.py::test_batch_space_concatenate_iterate_create_empty_array": "test_every_observation_space",
    "utils/test_space_utils.py::test_batch_space_deterministic": "test_every_action_space",
    "utils/test_space_utils.py::test_batch_space_different_samples": "test_every_action_space",
    "utils/test_space_utils.py::test_non_space": "test_non_space_observation_space",
    "utils/test_space_utils.py::test_custom_space": "test_custom_observation_space",
    "utils/test_space_utils.py::test_varying_spaces": "test_varying_spaces",
    "utils/test_space_utils.py::test_batch_differing_space_vs_batch_space": "test_every_observation_space",
    "utils/test_space_utils.py::test_batch_differing_spaces_deterministic": "test_every_action_space",
    "utils/test_space_utils.py::test_batch_differing_discrete_spaces_dtype": "test_batch_differing_discrete_spaces_dtype",
}

#: The ported gymnasium tests that fail as they are on the view (gymnasium's files run with the view in place of
#: SyncVectorEnv and AsyncVectorEnv), for a deliberate difference of the view, and how their ports check it instead.
DIFFERENCES = {
    "test_sync_vector_env.py::test_metadata_sync_vector_env": "it reads the env's metadata through SyncVectorEnv.envs;"
    " the view has no list of envs (they live in the env hosts, as AsyncVectorEnv's do): test_metadata reads it with"
    " get_attr('metadata')",
    "test_sync_vector_env.py::test_check_spaces_sync_vector_env": "it matches SyncVectorEnv's message, which names"
    " SyncVectorEnv; AsyncEnvPool itself refuses envs whose observations differ in shape or dtype, when it starts them"
    " (SpacesDifferError, a RuntimeError, naming the env): test_check_spaces matches the pool's message",
    "test_async_vector_env.py::test_async_vector_subenv_error": "it counts the warnings AsyncVectorEnv's workers log"
    " for an env's error (the view logs none, as SyncVectorEnv: its error carries the env's traceback), and it steps"
    " envs with actions outside their action space ([0, 1, 2] for Box(0, 1, (1,))), which the view refuses before any"
    " env steps (a ValueError): test_subenv_error checks both, and the env's own ValueError with valid actions",
}

#: How many test functions gymnasium 1.4's tests/vector holds (its 9 test files).
N_GYMNASIUM_VECTOR_TESTS = 67


def test_every_gymnasium_vector_test_is_accounted_for():
    assert not NOT_PORTED.keys() & PORTED.keys()
    assert DIFFERENCES.keys() <= PORTED.keys()
    assert len(NOT_PORTED) + len(PORTED) == N_GYMNASIUM_VECTOR_TESTS
    module = sys.modules[__name__]
    for port in set(PORTED.values()):
        assert callable(getattr(module, port, None)), port


# ------------------------------------------------------------------------------------------------------------- helpers
@pytest.fixture
def make_vector():
    """``make_vector(env_fns, autoreset_mode=NEXT_STEP, **pool_kwargs)``: the pool's view over the envs of ``env_fns``
    (one worker by default), closed after the test; ``SyncVectorEnv`` with ``SB3_ASYNC_GYM_REFERENCE=sync``."""
    made: list[VectorEnv] = []

    def make(env_fns: list[Callable[[], gym.Env]], autoreset_mode: Any = NEXT, **pool_kwargs: Any) -> VectorEnv:
        if REFERENCE:
            venv: VectorEnv = SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
        else:
            pool_kwargs.setdefault("n_hosts", 1)
            autoreset = AutoresetMode(autoreset_mode) != DISABLED
            venv = AsyncEnvPool(list(env_fns), autoreset=autoreset, **pool_kwargs).as_gym_vector_env(autoreset_mode)
        made.append(venv)
        return venv

    yield make
    for venv in made:
        venv.close()


def seeded_env(env_id: str, seed: int, **kwargs: Any) -> Callable[[], gym.Env]:
    """A factory of ``env_id`` whose env was reset and whose action space was seeded with ``seed`` (what gymnasium's
    tests/vector/testing_utils.py ``make_env`` gives)."""

    def factory() -> gym.Env:
        env = gym.make(env_id, disable_env_checker=True, **kwargs)
        env.action_space.seed(seed)
        env.reset(seed=seed)
        return env

    return factory


def sample_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[Any, dict]:
    env.observation_space.seed(env.np_random_seed)
    return env.observation_space.sample(), {"options": options}


def sample_step(env: FnEnv, action: Any) -> tuple[Any, float, bool, bool, dict]:
    return env.observation_space.sample(), 0.0, False, False, {}


class FnEnv(gym.Env):
    """An env whose ``reset`` and ``step`` are the functions given (gymnasium's tests build theirs with
    tests/testing_env.py's ``GenericTestEnv``): ``reset_fn(env, seed, options)`` after the env's own seeding,
    ``step_fn(env, action)``; spaces ``Box(0, 1, (1,))`` unless given."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        observation_space: Any = None,
        action_space: Any = None,
        reset_fn: Callable = sample_reset,
        step_fn: Callable = sample_step,
    ):
        # Each env its own spaces (the env reseeds its observation space): its factory hands every env the same ones
        self.observation_space = Box(0, 1, (1,)) if observation_space is None else copy.deepcopy(observation_space)
        self.action_space = Box(0, 1, (1,)) if action_space is None else copy.deepcopy(action_space)
        self.reset_fn, self.step_fn = reset_fn, step_fn

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return self.reset_fn(self, seed, options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        return self.step_fn(self, action)


def fn_envs(n: int, **kwargs: Any) -> list[Callable[[], gym.Env]]:
    return [functools.partial(FnEnv, **kwargs) for _ in range(n)]


class CustomSpace(Space):
    """A custom space of the numbers 0 to 10 (gymnasium's tests/vector/testing_utils.py ``CustomSpace``)."""

    def sample(self, mask: Any = None, probability: Any = None) -> Any:
        return self.np_random.integers(0, 10, ())

    def contains(self, x: Any) -> bool:
        return 0 <= x <= 10

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CustomSpace)


# The spaces of gymnasium's tests/spaces/utils.py (TESTING_SPACES), which its vector tests run over
SPACES: list[Space] = [
    Discrete(3),
    Discrete(3, start=-1),
    Discrete(4, start=1, dtype=np.int32),
    Box(0.0, 1.0),
    Box(0.0, np.inf, (2, 2)),
    Box(np.array([-10.0, 0.0]), np.array([10.0, 10.0]), dtype=np.float64),
    Box(-np.inf, 0.0, (2, 1)),
    Box(0.0, np.inf, (2, 1)),
    Box(0, 255, (2, 2, 3), np.uint8),
    Box(np.array([0, 0, 1]), np.array([1, 0, 1]), dtype=np.bool_),
    Box(np.array([-np.inf, -np.inf, 0, -10]), np.array([np.inf, 0, np.inf, 10]), dtype=np.int32),
    MultiDiscrete([2, 2]),
    MultiDiscrete([[2, 3], [3, 2]]),
    MultiDiscrete([2, 2], start=[10, 10]),
    MultiDiscrete([[2, 3], [3, 2]], start=[[10, 20], [30, 40]]),
    MultiDiscrete([2, 3], dtype=np.int8),
    MultiDiscrete([2, 3], dtype=np.uint16),
    MultiBinary(8),
    MultiBinary([2, 3]),
    Text(6),
    Text(min_length=3, max_length=6),
    Text(6, charset="abcdef"),
    Tuple([Discrete(5), Discrete(4)]),
    Tuple((Discrete(5), Box(np.array([0.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64))),
    Tuple((Discrete(5), Tuple((Box(0.0, 1.0, (3,)), Discrete(2))))),
    Tuple((Discrete(3), Dict(position=Box(0.0, 1.0), velocity=Discrete(2)))),
    Tuple((Graph(node_space=Box(-1, 1, (2, 1)), edge_space=None), Discrete(2))),
    Dict({"position": Discrete(5), "velocity": Box(np.array([0.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64)}),
    Dict(position=Discrete(6), velocity=Box(np.array([0.0, 0.0]), np.array([1.0, 5.0]), dtype=np.float64)),
    Dict(
        {
            "a": Box(0, 1, (3, 3)),
            "b": Dict({"b_1": Box(-100, 100, (2,)), "b_2": Box(-1, 1, (2,))}),
            "c": Discrete(4),
        }
    ),
    Dict(
        a=Dict(a=Graph(node_space=Box(-100, 100, (2, 2)), edge_space=None), b=Box(-100, 100, (2, 2))),
        b=Tuple((Box(-100, 100, (2,)), Box(-100, 100, (2,)))),
    ),
    Graph(node_space=Box(-1, 1, (2,)), edge_space=None),
    Graph(node_space=Box(-100, 100, (3, 4)), edge_space=Discrete(5)),
    Graph(node_space=Discrete(5), edge_space=Box(-100, 100, (3, 4))),
    Graph(node_space=Discrete(3), edge_space=Discrete(4)),
    Graph(node_space=Dict({"node_feature_1": Discrete(5), "node_feature_2": MultiBinary(5)}), edge_space=Box(1, 4)),
    Graph(node_space=MultiBinary(4), edge_space=None),
    Graph(node_space=MultiDiscrete([3, 4, 2]), edge_space=Discrete(3)),
    Graph(node_space=Tuple((Box(-1, 1, (2,)), Discrete(3))), edge_space=None),
    Graph(node_space=Discrete(4), edge_space=Tuple((Box(0, 1, (2,)), Discrete(3)))),
    Graph(node_space=Discrete(3), edge_space=Dict({"weight": Box(0, 1, ()), "type": Discrete(4)})),
    Graph(
        node_space=Dict({"pos": Box(-10, 10, (3,)), "label": Discrete(5)}),
        edge_space=Dict({"weight": Box(0, 1, ()), "type": Discrete(3)}),
    ),
    Graph(
        node_space=Tuple((Dict({"a": Discrete(3)}), MultiBinary(2))),
        edge_space=Tuple((Discrete(4), Box(0, 1, (2,)))),
    ),
    Sequence(Discrete(4)),
    Sequence(Dict({"feature": Box(0, 1, (3,))})),
    Sequence(Graph(node_space=Box(-100, 100, (2, 2)), edge_space=Discrete(4))),
    Sequence(Box(0.0, 1.0), stack=True),
    Sequence(Dict({"a": Box(0, 1, (3,)), "b": Discrete(5)}), stack=True),
    OneOf([Discrete(3), Box(0.0, 1.0)]),
    OneOf([MultiBinary(2), MultiDiscrete([2, 2])]),
]
SPACE_IDS = [f"{s}{'-' + s.dtype.name if isinstance(s, MultiDiscrete) else ''}" for s in SPACES]
ACTION_SPACE_PARAMS = [pytest.param(s, id=i) for s, i in zip(SPACES, SPACE_IDS)]


def samples(space: Space, seed: int, count: int) -> list[Any]:
    """The first ``count`` samples of a copy of ``space`` seeded with ``seed``."""
    space = copy.deepcopy(space)
    space.seed(seed)
    return [space.sample() for _ in range(count)]


def count_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[int, dict]:
    env.count = 0 if seed is None else seed
    return env.count, {}


def count_step(env: FnEnv, action: Any) -> tuple[int, Any, bool, bool, dict]:
    env.count += 1
    return env.count, action, env.count == env.max_count, False, {}


def counting_envs(n: int = 3) -> list[Callable[[], gym.Env]]:
    """Envs whose observation is a step count, whose reward is the action, ending at ``max_count`` (gymnasium's
    tests/vector/test_autoreset_mode.py ``count_reset`` and ``count_step``)."""
    return fn_envs(n, observation_space=Discrete(5), action_space=Discrete(5), reset_fn=count_reset, step_fn=count_step)


# ------------------------------------------------------------------------------------------ tests/vector/test_vector_env
@pytest.mark.parametrize("mode", [NEXT, SAME], ids=lambda m: m.value)
def test_vector_env_equal(make_vector, mode):
    """Port of test_vector_env.py::test_vector_env_equal: the view and SyncVectorEnv give equal results."""
    env_fns = [seeded_env("CartPole-v1", i) for i in range(4)]
    ours = make_vector(env_fns, mode)
    theirs = SyncVectorEnv(env_fns, autoreset_mode=mode)
    try:
        assert ours.num_envs == theirs.num_envs
        for name in ("observation_space", "single_observation_space", "action_space", "single_action_space"):
            assert getattr(ours, name) == getattr(theirs, name), name
        obs, infos = ours.reset(seed=0)
        expected_obs, expected_infos = theirs.reset(seed=0)
        assert np.all(obs == expected_obs) and data_equivalence(infos, expected_infos)
        ends = 0
        for _ in range(100):
            actions = ours.action_space.sample()
            assert actions in theirs.action_space
            ours_step, theirs_step = ours.step(actions), theirs.step(actions)
            for a, b in zip(ours_step[:4], theirs_step[:4]):
                assert np.all(a == b)
            assert data_equivalence(ours_step[4], theirs_step[4])
            ends += int((theirs_step[2] | theirs_step[3]).sum())
        assert ends > 0  # the autoreset was exercised
    finally:
        theirs.close()


def counted_sample_step(env: FnEnv, action: Any) -> tuple[Any, float, bool, bool, dict]:
    assert action in env.action_space, f"{action!r} not in {env.action_space}"
    env.count = getattr(env, "count", 0) + 1
    return env.observation_space.sample(), float(env.count), env.count == env.max_count, False, {}


def resampled_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[Any, dict]:
    env.count = 0
    return sample_reset(env, seed, options)


@pytest.mark.parametrize("space", SPACES, ids=SPACE_IDS)
def test_every_observation_space(make_vector, space):
    """Port of test_autoreset_mode.py::test_same_step_final_obs (each space as the observation space, SAME_STEP: the
    final observations are in the single space), with the observation checks of
    test_vector_env.py::test_vector_obs_action_spaces (an observation of the batched space after reset and step) and
    of utils/test_space_utils.py's test_batch_space_concatenate_iterate_create_empty_array (the view's batch is what
    ``concatenate`` makes of the envs' observations, ``iterate`` gives them back) and
    test_batch_differing_space_vs_batch_space (on the view's batched observation space). The envs' observations are
    known: each reseeds its observation space at reset, and samples it at every step."""
    n = 4
    envs = make_vector(
        fn_envs(
            n,
            observation_space=space,
            action_space=Discrete(5),
            reset_fn=resampled_reset,
            step_fn=counted_sample_step,
        ),
        SAME,
    )
    assert envs.single_observation_space == space
    assert envs.observation_space == batch_space(space, n)
    assert envs.observation_space == batch_differing_spaces([copy.deepcopy(space) for _ in range(n)])

    envs.set_attr("max_count", [2, 3, 3, 3])
    expected = [samples(space, seed, 4) for seed in range(n)]  # each env's reset and step observations
    obs, _ = envs.reset(seed=0)
    assert obs in envs.observation_space
    items = list(iterate(envs.observation_space, obs))
    assert len(items) == n
    for item, mine in zip(items, expected):
        assert item in space and data_equivalence(item, mine[0])
    assert data_equivalence(obs, concatenate(space, [mine[0] for mine in expected], create_empty_array(space, n)))

    obs, *_ = envs.step([1, 2, 3, 4])
    assert obs in envs.observation_space
    assert data_equivalence(obs, concatenate(space, [mine[1] for mine in expected], create_empty_array(space, n)))
    _, _, terminations, _, info = envs.step([1, 2, 3, 4])  # env 0 ends
    assert terminations.tolist() == [True, False, False, False]
    assert info["final_obs"][0] in envs.single_observation_space
    assert data_equivalence(info["final_obs"][0], expected[0][2])
    _, _, terminations, _, info = envs.step([1, 2, 3, 4])  # envs 1, 2 and 3 end
    assert terminations.tolist() == [False, True, True, True]
    for i in (1, 2, 3):
        assert info["final_obs"][i] in envs.single_observation_space
        assert data_equivalence(info["final_obs"][i], expected[i][3])


@pytest.mark.parametrize("space", ACTION_SPACE_PARAMS)
def test_every_action_space(make_vector, space):
    """Port of test_vector_env.py::test_vector_obs_action_spaces (each space as the observation and the action space:
    equal batched spaces, actions of the batched space reach the envs in their space, observations in the batched
    space), with utils/test_space_utils.py's test_batch_space_deterministic, test_batch_differing_spaces_deterministic
    and test_batch_space_different_samples on the view's batched action space (seeded alike, it samples alike, as
    batch_differing_spaces' does, each env its own value, from a generator of its own)."""
    n = 4
    envs = make_vector(fn_envs(n, observation_space=space, action_space=space, step_fn=counted_sample_step))
    assert envs.single_action_space == space
    assert envs.observation_space == envs.action_space == batch_space(space, n)

    envs.action_space.seed(123)
    twin = copy.deepcopy(envs.action_space)
    differing = batch_differing_spaces([copy.deepcopy(space) for _ in range(n)])
    differing.seed(123)
    assert envs.action_space.np_random is not twin.np_random
    assert envs.action_space.np_random is not envs.single_action_space.np_random
    actions = envs.action_space.sample()
    assert data_equivalence(actions, twin.sample())
    assert data_equivalence(actions, differing.sample())
    rows = list(iterate(envs.action_space, actions))
    assert len(rows) == n and all(row in space for row in rows)
    assert not all(data_equivalence(row, rows[0]) for row in rows), rows

    envs.set_attr("max_count", 10)
    obs, _ = envs.reset()
    assert obs in envs.observation_space
    for _ in range(2):  # the env asserts each action is in its space
        obs, *_ = envs.step(envs.action_space.sample())
        assert obs in envs.observation_space


def final_obs_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[int, dict]:
    return 0, {"reset": True}


def final_obs_step(env: FnEnv, action: Any) -> tuple[int, int, bool, bool, dict]:
    return (action if action < 3 else 0), 0, bool(action >= 3), False, {"action": action}


def test_final_obs_info(make_vector):
    """Port of test_vector_env.py::test_final_obs_info: the observations, terminations and infos of the step where the
    env ends and of the next one (NEXT_STEP), one env."""
    discrete = Discrete(4)
    env = make_vector(
        fn_envs(1, observation_space=discrete, action_space=discrete, reset_fn=final_obs_reset, step_fn=final_obs_step)
    )
    obs, info = env.reset()
    assert obs == np.array([0]) and info == {"reset": np.array([True]), "_reset": np.array([True])}
    for action in (1, 2):
        obs, _, termination, _, info = env.step([action])
        assert obs == np.array([action]) and termination == np.array([False])
        assert info == {"action": np.array([action]), "_action": np.array([True])}
    obs, _, termination, _, info = env.step([3])
    assert obs == np.array([0]) and termination == np.array([True])
    assert info == {"action": 3, "_action": np.array([True])}
    obs, _, termination, _, info = env.step([4])  # the env only resets: the action (outside the space) is ignored
    assert obs == np.array([0]) and termination == np.array([False]) and info["reset"] == np.array([True])


def test_random_seeding_basics(make_vector):
    """Port of test_vector_env.py::test_random_seeding_basics."""
    env = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    env.reset(seed=42)
    assert env.np_random_seed == (42, 43, 44, 45)
    env.reset(seed=None)  # no seed: the envs keep theirs
    assert env.np_random_seed == (42, 43, 44, 45)


def test_random_seeds_set_at_retrieval(make_vector):
    """Port of test_vector_env.py::test_random_seeds_set_at_retrieval: the seeds the envs were made with."""
    env = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    assert len(set(env.np_random_seed)) == env.num_envs
    assert env.np_random_seed == (0, 1, 2, 3)


def test_partial_reset(make_vector):
    """Port of test_vector_env.py::test_partial_reset: a reset_mask resets only its envs (DISABLED)."""
    envs = make_vector([functools.partial(gym.make, "CartPole-v1") for _ in range(3)], DISABLED)
    reset_obs, _ = envs.reset(seed=[0, 1, 2])
    envs.action_space.seed(123)
    for _ in range(3):
        step_obs, *_ = envs.step(envs.action_space.sample())
    mask_obs, _ = envs.reset(seed=[0, 1, 0], options={"reset_mask": np.array([True, True, False])})
    assert np.all(mask_obs[:2] == reset_obs[:2])
    assert np.all(mask_obs[2] == step_obs[2])


def test_partial_reset_failure(make_vector):
    """Port of test_vector_env.py::test_partial_reset_failure: gymnasium's errors and messages for a bad reset_mask."""
    envs = make_vector([functools.partial(gym.make, "CartPole-v1") for _ in range(3)], DISABLED)
    envs.reset(options={"reset_mask": np.array([True, True, True])})
    for mask, shape in (([True], "(1,)"), ([True, True, False, False], "(4,)"), ([[True, True, True]], "(1, 3)")):
        message = f"`options['reset_mask']` must have shape `(3,)`, got {shape}"
        with pytest.raises(ValueError, match=re.escape(message)):
            envs.reset(options={"reset_mask": np.array(mask)})
    message = (
        "`options['reset_mask']` must contain a boolean array with at least one True value, got reset_mask=[False False False]"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        envs.reset(options={"reset_mask": np.array([False, False, False])})
    for mask, dtype in (([1, 1, 0], "int64"), ([1.0, 1.0, 0.0], "float64")):
        with pytest.raises(TypeError, match=re.escape(f"`options['reset_mask']` must have `dtype=np.bool_`, got {dtype}")):
            envs.reset(options={"reset_mask": np.array(mask)})


def test_action_count_compatibility(make_vector):
    """Port of test_vector_env.py::test_action_count_compatibility: one action per env, else ValueError (TypeError for
    a scalar)."""
    envs = make_vector([functools.partial(gym.make, "CartPole-v1") for _ in range(4)], DISABLED)
    envs.reset()
    actions = envs.action_space.sample()
    assert len(actions) == 4
    for batch in envs.step(actions)[:4]:
        assert len(batch) == 4
    with pytest.raises(ValueError):
        envs.step(actions[:3])
    with pytest.raises(ValueError):
        envs.step(np.concatenate([actions, actions[:1]]))
    with pytest.raises(TypeError):
        envs.step(0)


# ----------------------------------------------------------------- tests/vector/test_sync_vector_env, _async_vector_env
def test_create(make_vector):
    """Port of test_sync_vector_env.py::test_create_sync_vector_env and
    test_async_vector_env.py::test_create_async_vector_env."""
    assert make_vector([seeded_env("FrozenLake-v1", i) for i in range(4)]).num_envs == 4
    assert make_vector([seeded_env("CartPole-v1", i) for i in range(3)]).num_envs == 3


def test_metadata(make_vector):
    """Port of test_sync_vector_env.py::test_metadata_sync_vector_env and
    test_async_vector_env.py::test_metadata_async_vector_env: each view's metadata holds its autoreset mode, a copy
    that leaves the envs' (class-level) metadata alone (read with get_attr, where SyncVectorEnv's test reads
    ``envs.envs[0].metadata``: see :data:`DIFFERENCES`)."""
    envs_1 = make_vector([seeded_env("CartPole-v1", 0)], NEXT)
    envs_2 = make_vector([seeded_env("CartPole-v1", 1)], SAME)
    assert envs_1.metadata["autoreset_mode"] == NEXT
    assert envs_2.metadata["autoreset_mode"] == SAME
    assert "autoreset_mode" not in envs_1.get_attr("metadata")[0]
    env = seeded_env("CartPole-v1", 0)()
    assert "autoreset_mode" not in env.metadata
    env.close()


def test_reset(make_vector):
    """Port of test_sync_vector_env.py::test_reset_sync_vector_env and
    test_async_vector_env.py::test_reset_async_vector_env."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    observations, infos = envs.reset()
    assert isinstance(envs.observation_space, Box)
    assert isinstance(observations, np.ndarray)
    assert observations.dtype == envs.observation_space.dtype
    assert observations.shape == (4, *envs.single_observation_space.shape) == envs.observation_space.shape
    assert isinstance(infos, dict)


@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "CartPole-v1"])
@pytest.mark.parametrize("use_single_action_space", [True, False])
def test_step(make_vector, env_id, use_single_action_space):
    """Port of test_sync_vector_env.py::test_step_sync_vector_env (FrozenLake) and
    test_async_vector_env.py::test_step_async_vector_env (CartPole): the batches' types, dtypes and shapes, for
    actions as a list of single actions or as a batch."""
    envs = make_vector([seeded_env(env_id, i) for i in range(4)])
    envs.reset()
    assert isinstance(envs.single_action_space, Discrete)
    assert isinstance(envs.action_space, MultiDiscrete)
    single_actions = [envs.single_action_space.sample() for _ in range(4)]
    actions = single_actions if use_single_action_space else envs.action_space.sample()
    observations, rewards, terminations, truncations, _ = envs.step(actions)
    assert isinstance(envs.observation_space, MultiDiscrete if env_id == "FrozenLake-v1" else Box)
    assert isinstance(observations, np.ndarray)
    assert observations.dtype == envs.observation_space.dtype
    assert observations.shape == (4, *envs.single_observation_space.shape) == envs.observation_space.shape
    assert isinstance(rewards, np.ndarray) and isinstance(rewards[0], (float, np.floating))
    assert rewards.ndim == 1 and rewards.size == 4
    for flags in (terminations, truncations):
        assert isinstance(flags, np.ndarray) and flags.dtype == np.bool_
        assert flags.ndim == 1 and flags.size == 4


def test_render(make_vector):
    """Port of test_sync_vector_env.py::test_render_sync_vector and test_async_vector_env.py::test_render_async_vector."""
    envs = make_vector([seeded_env("CartPole-v1", i, render_mode="rgb_array") for i in range(3)])
    assert envs.render_mode == "rgb_array"
    envs.reset()
    frames = envs.render()
    assert isinstance(frames, tuple) and len(frames) == envs.num_envs
    assert all(isinstance(frame, np.ndarray) for frame in frames)
    assert make_vector([seeded_env("CartPole-v1", i) for i in range(3)]).render_mode is None


def test_call(make_vector):
    """Port of test_sync_vector_env.py::test_call_sync_vector_env and test_async_vector_env.py::test_call_async_vector_env:
    ``call`` of a method returns its results, of an attribute its value."""
    envs = make_vector([seeded_env("CartPole-v1", i, render_mode="rgb_array_list") for i in range(4)])
    envs.reset()
    images, gravity = envs.call("render"), envs.call("gravity")
    assert isinstance(images, tuple) and len(images) == 4
    for frames in images:
        assert len(frames) == 1 and isinstance(frames[0], np.ndarray)
    assert isinstance(gravity, tuple) and len(gravity) == 4
    assert all(isinstance(value, float) and value == 9.8 for value in gravity)


def test_set_attr(make_vector):
    """Port of test_sync_vector_env.py::test_set_attr_sync_vector_env and
    test_async_vector_env.py::test_set_attr_async_vector_env."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    envs.set_attr("gravity", [9.81, 3.72, 8.87, 1.62])
    assert envs.get_attr("gravity") == (9.81, 3.72, 8.87, 1.62)


def test_check_spaces():
    """Port of test_sync_vector_env.py::test_check_spaces_sync_vector_env and
    test_async_vector_env.py::test_check_spaces_async_vector_env: envs with different spaces are refused with a
    RuntimeError; SyncVectorEnv's message names SyncVectorEnv, the pool's names the env (see :data:`DIFFERENCES`)."""
    env_fns = [seeded_env("CartPole-v1", i) for i in range(8)]
    env_fns[1] = seeded_env("FrozenLake-v1", 1)
    if REFERENCE:
        message = re.escape(
            "SyncVectorEnv(..., observation_mode='same') however the sub-environments observation spaces are not equivalent."
        )
    else:
        message = (
            r"Env 1 has observation space Discrete\(16\), env 0 has Box\(.*\): the envs' observations must have the same "
            "shapes and dtypes"
        )
    with pytest.raises(RuntimeError, match=message):
        if REFERENCE:
            SyncVectorEnv(env_fns)
        else:
            AsyncEnvPool(env_fns, n_hosts=1).as_gym_vector_env()


def custom_space_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[str, dict]:
    return "reset", {}


def custom_space_step(env: FnEnv, action: Any) -> tuple[str, float, bool, bool, dict]:
    return f"step({action:s})", 0.0, False, False, {}


def test_custom_space(make_vector):
    """Port of test_sync_vector_env.py::test_custom_space_sync_vector_env and
    test_async_vector_env.py::test_custom_space_async_vector_env: custom observation and action spaces are batched as
    Tuples of copies; their values go through as they are."""
    envs = make_vector(
        fn_envs(
            4,
            observation_space=CustomSpace(),
            action_space=CustomSpace(),
            reset_fn=custom_space_reset,
            step_fn=custom_space_step,
        )
    )
    assert isinstance(envs.single_action_space, CustomSpace) and isinstance(envs.action_space, Tuple)
    assert isinstance(envs.single_observation_space, CustomSpace) and isinstance(envs.observation_space, Tuple)
    reset_observations, _ = envs.reset()
    assert reset_observations == ("reset",) * 4
    step_observations, *_ = envs.step(("action-2", "action-3", "action-5", "action-7"))
    assert step_observations == ("step(action-2)", "step(action-3)", "step(action-5)", "step(action-7)")


def custom_value_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[Any, dict]:
    return env.observation_space.sample(), {}


def test_custom_observation_space(make_vector):
    """Port of utils/test_space_utils.py::test_custom_space (batch_space of a custom space is a Tuple of copies, its
    batches tuples of values), on the view over envs with a custom observation space."""
    envs = make_vector(fn_envs(2, observation_space=CustomSpace(), reset_fn=custom_value_reset))
    assert envs.single_observation_space == CustomSpace()
    assert envs.observation_space == Tuple([CustomSpace(), CustomSpace()]) == batch_space(CustomSpace(), n=2)
    obs, _ = envs.reset(seed=3)
    assert isinstance(obs, tuple) and len(obs) == 2
    assert all(envs.single_observation_space.contains(value) for value in obs)
    obs, *_ = envs.step(envs.action_space.sample())
    assert isinstance(obs, tuple) and len(obs) == 2


def test_vector_env_seed(make_vector):
    """Port of test_sync_vector_env.py::test_sync_vector_env_seed: the batched action space samples as the seeded env's
    own action space."""
    env = seeded_env("BipedalWalker-v3", 123)()
    envs = make_vector([seeded_env("BipedalWalker-v3", 123)])
    assert env.action_space.np_random.bit_generator.state == envs.action_space.np_random.bit_generator.state
    for _ in range(100):
        assert np.all(env.action_space.sample() == envs.action_space.sample())
    env.close()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "FrozenLake-v1", "Blackjack-v1", "LunarLander-v3"])
def test_vector_determinism(make_vector, env_id):
    """Port of test_sync_vector_env.py::test_sync_vector_determinism (there over every registered env, here over a
    few of each kind of space): views made alike sample the same actions."""
    envs_1 = make_vector([seeded_env(env_id, 123) for _ in range(3)])
    envs_2 = make_vector([seeded_env(env_id, 123) for _ in range(3)])
    assert envs_1.action_space.np_random.bit_generator.state == envs_2.action_space.np_random.bit_generator.state
    for _ in range(100):
        assert np.all(envs_1.action_space.sample() == envs_2.action_space.sample())


def test_copy_and_no_copy(make_vector):
    """Port of test_async_vector_env.py::test_copy_async_vector_env and test_no_copy_async_vector_env (which only
    write into the observations returned): the view's observations are the caller's, writable, and no later call
    changes them, nor do they change what later calls return."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    observations, _ = envs.reset(seed=0)
    kept = observations.copy()
    observations[0] = 0
    stepped, *_ = envs.step(np.zeros(4, np.int64))
    assert np.all(observations[0] == 0) and np.all(observations[1:] == kept[1:])
    before = stepped.copy()
    stepped[:] = -1
    again, _ = envs.reset(seed=0)
    assert np.all(again == kept) and np.all(stepped == -1) and not np.all(before == -1)


@pytest.mark.skipif(REFERENCE, reason="AsyncVectorEnv's behaviour: SyncVectorEnv resets after close()")
def test_already_closed(make_vector):
    """Port of test_async_vector_env.py::test_already_closed_async_vector_env."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(4)])
    envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()


def no_typecode_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[np.ndarray, dict]:
    return np.random.default_rng(seed).uniform(-1, 1, env.observation_space.shape).astype(env.observation_space.dtype), {}


def no_typecode_step(env: FnEnv, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
    value = env.np_random.uniform(-1, 1, env.observation_space.shape).astype(env.observation_space.dtype)
    return value, 0.0, False, False, {}


@pytest.mark.parametrize("dtype", [np.float16] + ([np.float128] if hasattr(np, "float128") else []), ids=str)
def test_no_array_typecode_dtypes(make_vector, dtype):
    """Port of test_async_vector_env.py::test_float16_async_vector_env_shared_memory and
    utils/test_shared_memory.py::test_shared_memory_no_array_typecode_dtypes: observations of dtypes without an
    ``array`` typecode (float16, float128) go through the pool's shared memory whole, in their dtype."""
    space = Box(-1.0, 1.0, (2, 3), dtype)
    envs = make_vector(fn_envs(2, observation_space=space, reset_fn=no_typecode_reset, step_fn=no_typecode_step))
    observations, _ = envs.reset(seed=[5, 6])
    assert observations.dtype == dtype and observations.shape == (2, 2, 3)
    for observation, seed in zip(observations, (5, 6)):
        expected = np.random.default_rng(seed).uniform(-1, 1, (2, 3)).astype(dtype)
        assert data_equivalence(observation, expected, exact=True)
    observations, *_ = envs.step(envs.action_space.sample())
    assert observations.dtype == dtype and observations.shape == (2, 2, 3)


def error_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[Any, dict]:
    if seed == 1:
        raise ValueError("Error in reset")
    return env.observation_space.sample(), {}


def error_step(env: FnEnv, action: Any) -> tuple[Any, float, bool, bool, dict]:
    if action >= 1:
        raise ValueError(f"Error in step with {action}")
    return env.observation_space.sample(), 0.0, False, False, {}


def test_subenv_error(make_vector):
    """Port of test_async_vector_env.py::test_async_vector_subenv_error: an env's exception reaches the caller as its
    type (a ValueError here), from reset and from step, with no warning (AsyncVectorEnv's workers log three; the
    view's error carries the env's traceback, as the second of those does). Gymnasium's test steps its envs, whose
    actions are Box(0, 1, (1,)), with [0, 1, 2]: the view refuses those before any env steps, with a ValueError
    (see :data:`DIFFERENCES`); with valid actions the envs raise their own."""
    box, discrete = Box(0, 1, (1,)), Discrete(3)
    envs = make_vector(fn_envs(2, observation_space=box, action_space=discrete, reset_fn=error_reset, step_fn=error_step))
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        envs.reset(seed=[0, 0])
        with pytest.raises(ValueError, match="Error in reset") as caught:
            envs.reset(seed=[1, 0])
    assert not caught_warnings, [str(warning.message) for warning in caught_warnings]
    if not REFERENCE:
        assert "Env 0 of the AsyncEnvPool raised in reset()" in str(caught.value)
        # the env's traceback, as AsyncVectorEnv's warning has it (its source lines when the host can read them)
        traceback = r'in error_reset\n(    raise ValueError\("Error in reset"\)\n)?ValueError: Error in reset\n'
        assert re.search(traceback, str(caught.value)), str(caught.value)

    envs = make_vector(fn_envs(3, observation_space=box, action_space=discrete, reset_fn=error_reset, step_fn=error_step))
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="Error in step with [12]") as caught:
            envs.step([0, 1, 2])
    assert not caught_warnings, [str(warning.message) for warning in caught_warnings]
    if not REFERENCE:
        line = r'(    raise ValueError\(f"Error in step with \{action\}"\)\n)?'
        traceback = rf"in error_step\n{line}ValueError: Error in step with [12]\n"
        assert re.search(traceback, str(caught.value)), str(caught.value)

    envs = make_vector(fn_envs(3, observation_space=box, action_space=box, reset_fn=error_reset, step_fn=error_step))
    envs.reset(seed=[0, 0, 0])
    with pytest.raises(ValueError, match="Error in step with 1" if REFERENCE else re.escape("Invalid actions [0, 1, 2]")):
        envs.step([0, 1, 2])


# ------------------------------------------------------------------------------------- tests/vector/test_autoreset_mode
def test_autoreset_next_step(make_vector):
    """Port of test_autoreset_mode.py::test_autoreset_next_step: an env that ended steps no more at the next step; it
    returns its reset observation, reward 0, not terminated."""
    envs = make_vector(counting_envs(), NEXT)
    assert envs.metadata["autoreset_mode"] == NEXT
    envs.set_attr("max_count", [2, 3, 3])
    obs, info = envs.reset()
    assert np.all(obs == [0, 0, 0]) and info == {}
    for expected_obs, rewards, terminations in (
        ([1, 1, 1], [1, 2, 3], [False, False, False]),
        ([2, 2, 2], [1, 2, 3], [True, False, False]),
        ([0, 3, 3], [0, 2, 3], [False, True, True]),
        ([1, 0, 0], [1, 0, 0], [False, False, False]),
    ):
        obs, reward, terminated, truncated, info = envs.step([1, 2, 3])
        assert np.all(obs == expected_obs) and np.all(reward == rewards) and np.all(terminated == terminations)
        assert not truncated.any() and info == {}


def test_autoreset_within_step(make_vector):
    """Port of test_autoreset_mode.py::test_autoreset_within_step: an env that ends returns its reset observation, the
    last one in infos["final_obs"], at the same step."""
    envs = make_vector(counting_envs(), SAME)
    assert envs.metadata["autoreset_mode"] == SAME
    envs.set_attr("max_count", [2, 3, 3])
    obs, info = envs.reset()
    assert np.all(obs == [0, 0, 0]) and info == {}
    obs, rewards, terminations, truncations, info = envs.step([1, 2, 3])
    assert np.all(obs == [1, 1, 1]) and np.all(rewards == [1, 2, 3]) and not terminations.any() and info == {}
    for expected_obs, ended, final_obs in (
        ([0, 2, 2], [True, False, False], [2, None, None]),
        ([1, 0, 0], [False, True, True], [None, 3, 3]),
        ([0, 1, 1], [True, False, False], [2, None, None]),
    ):
        obs, rewards, terminations, truncations, info = envs.step([1, 2, 3])
        assert np.all(obs == expected_obs) and np.all(rewards == [1, 2, 3])
        assert np.all(terminations == ended) and not truncations.any()
        expected_info = {
            "final_obs": np.array(final_obs, dtype=object),
            "final_info": {},
            "_final_obs": np.array(ended),
            "_final_info": np.array(ended),
        }
        assert data_equivalence(info, expected_info), info


def test_autoreset_disabled(make_vector):
    """Port of test_autoreset_mode.py::test_autoreset_disabled: the envs that ended are reset by a reset_mask."""
    envs = make_vector(counting_envs(), DISABLED)
    assert envs.metadata["autoreset_mode"] == DISABLED
    envs.set_attr("max_count", [2, 3, 3])
    obs, info = envs.reset()
    assert np.all(obs == [0, 0, 0]) and info == {}
    script = (
        ([1, 1, 1], [False, False, False], None),
        ([2, 2, 2], [True, False, False], [0, 2, 2]),
        ([1, 3, 3], [False, True, True], [1, 0, 0]),
        ([2, 1, 1], [True, False, False], None),
    )
    for expected_obs, ended, reset_obs in script:
        obs, rewards, terminations, truncations, info = envs.step([1, 2, 3])
        assert np.all(obs == expected_obs) and np.all(rewards == [1, 2, 3])
        assert np.all(terminations == ended) and not truncations.any() and info == {}
        if reset_obs is not None:
            obs, info = envs.reset(options={"reset_mask": terminations})
            assert np.all(obs == reset_obs) and info == {}


@pytest.mark.parametrize("mode", [NEXT, DISABLED, SAME], ids=lambda m: m.value)
def test_autoreset_metadata(make_vector, mode):
    """Port of test_autoreset_mode.py::test_autoreset_metadata: the mode, given as the enum or its value."""
    assert make_vector(fn_envs(2), mode).metadata["autoreset_mode"] == mode
    assert make_vector(fn_envs(2), mode.value).metadata["autoreset_mode"] == mode


def pool_vector_entry_point(num_envs: int, autoreset_mode: Any = NEXT, **kwargs: Any) -> VectorEnv:
    """A registered ``vector_entry_point`` that builds the pool's view (the reference builds a SyncVectorEnv)."""
    env_fns = [functools.partial(gym.make, "CartPole-v1", **kwargs)] * num_envs
    if REFERENCE:
        return SyncVectorEnv(env_fns, autoreset_mode=autoreset_mode)
    autoreset = AutoresetMode(autoreset_mode) != DISABLED
    return AsyncEnvPool(env_fns, n_hosts=1, autoreset=autoreset).as_gym_vector_env(autoreset_mode)


@pytest.mark.parametrize("mode", [NEXT, DISABLED, SAME], ids=lambda m: m.value)
def test_make_vec_autoreset(mode):
    """Port of test_autoreset_mode.py::test_make_vec_autoreset (there through make_vec's sync and async modes, here
    through an env id whose vector_entry_point is the pool's view): the mode, as the enum or its value, reaches the
    view's metadata."""
    env_id = "PoolCartPoleTest-v0"
    gym.register(env_id, vector_entry_point=pool_vector_entry_point)
    try:
        for value in (mode, mode.value):
            envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="vector_entry_point", autoreset_mode=value)
            try:
                assert envs.metadata["autoreset_mode"] == mode
                assert envs.num_envs == 2
            finally:
                envs.close()
    finally:
        del gym.registry[env_id]


# ----------------------------------------------------------------------------------- tests/vector/test_vector_env_info
#: Infos of gymnasium's test_vector_add_info, one list per case (one info per env), with the infos stacked
ADD_INFO_CASES: list[tuple[list[dict[str, Any]], dict[str, Any]]] = [
    (
        [{"a": 0, "b": 0.0, "c": None, "d": np.zeros(2), "e": Discrete(1)}],
        {
            "a": np.array([0]),
            "b": np.array([0.0]),
            "c": np.array([None], dtype=object),
            "d": np.zeros((1, 2)),
            "e": np.array([Discrete(1)], dtype=object),
            **{f"_{key}": np.array([True]) for key in "abcde"},
        },
    ),
    (
        [{"a": k, "b": float(k), "c": None, "d": np.zeros(2), "e": Discrete(k + 1)} for k in range(3)],
        {
            "a": np.array([0, 1, 2]),
            "b": np.array([0.0, 1.0, 2.0]),
            "c": np.array([None, None, None], dtype=object),
            "d": np.zeros((3, 2)),
            "e": np.array([Discrete(1), Discrete(2), Discrete(3)], dtype=object),
            **{f"_{key}": np.array([True, True, True]) for key in "abcde"},
        },
    ),
    (
        [{"a": 1, "b": 1.0}, {"c": None, "d": np.zeros(2)}, {"e": Discrete(3)}],
        {
            "a": np.array([1, 0, 0]),
            "b": np.array([1.0, 0.0, 0.0]),
            "c": np.array([None, None, None], dtype=object),
            "d": np.zeros((3, 2)),
            "e": np.array([None, None, Discrete(3)], dtype=object),
            "_a": np.array([True, False, False]),
            "_b": np.array([True, False, False]),
            "_c": np.array([False, True, False]),
            "_d": np.array([False, True, False]),
            "_e": np.array([False, False, True]),
        },
    ),
    (
        [{"episode": {"a": 1, "b": 1.0}}, {"episode": {"a": 2, "b": 2.0}, "a": 1}, {"a": 2}],
        {
            "episode": {
                "a": np.array([1, 2, 0]),
                "b": np.array([1.0, 2.0, 0.0]),
                "_a": np.array([True, True, False]),
                "_b": np.array([True, True, False]),
            },
            "_episode": np.array([True, True, False]),
            "a": np.array([0, 1, 2]),
            "_a": np.array([False, True, True]),
        },
    ),
]


def case_info_reset(env: FnEnv, seed: int | None, options: dict | None) -> tuple[Any, dict]:
    assert options is not None
    return env.observation_space.sample(), options["infos"][env.index]


def case_info_step(env: FnEnv, action: Any) -> tuple[Any, float, bool, bool, dict]:
    return env.observation_space.sample(), 0.0, False, False, env.step_info


def test_vector_add_info(make_vector):
    """Port of test_vector_env_info.py::test_vector_add_info (there VectorEnv._add_info called directly, here the envs'
    infos through the view, at reset and at a step): values stacked in arrays of their type (objects otherwise), a
    ``_key`` mask per key, nested dicts stacked alike."""
    for n_envs, cases in ((1, ADD_INFO_CASES[:1]), (3, ADD_INFO_CASES[1:])):
        envs = make_vector(fn_envs(n_envs, reset_fn=case_info_reset, step_fn=case_info_step))
        envs.set_attr("index", list(range(n_envs)))
        for infos, expected in cases:
            _, stacked = envs.reset(options={"infos": infos})
            assert data_equivalence(stacked, expected), stacked
            envs.set_attr("step_info", infos)  # one per env
            *_, stacked = envs.step(envs.action_space.sample())
            assert data_equivalence(stacked, expected), stacked


class ReturnInfoEnv(gym.Env):
    """An env that returns the infos it was given, ending at every step (test_vector_env_info.py's own)."""

    def __init__(self, infos: list[dict[str, Any]]):
        self.observation_space, self.action_space = Box(0, 1), Box(0, 1)
        self.infos = infos

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return self.observation_space.sample(), self.infos[0]

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        return self.observation_space.sample(), 0.0, True, False, self.infos[1]


def test_vector_return_info(make_vector):
    """Port of test_vector_env_info.py::test_vector_return_info: the infos of reset and of a step that ends the
    episode (NEXT_STEP: that step's own info)."""
    envs = make_vector(
        [
            functools.partial(ReturnInfoEnv, [{"a": 1}, {"c": np.array([1, 2])}]),
            functools.partial(ReturnInfoEnv, [{"a": 2, "b": 3}, {"c": np.array([3, 4])}]),
        ]
    )
    _, reset_info = envs.reset()
    expected = {"a": np.array([1, 2]), "b": np.array([0, 3]), "_a": np.array([True, True]), "_b": np.array([False, True])}
    assert data_equivalence(reset_info, expected), reset_info
    *_, step_info = envs.step(envs.action_space.sample())
    assert data_equivalence(step_info, {"c": np.array([[1, 2], [3, 4]]), "_c": np.array([True, True])}), step_info


# --------------------------------------------------------------------------------- tests/vector/test_observation_mode
def box_envs(*spaces: Space) -> list[Callable[[], gym.Env]]:
    return [functools.partial(FnEnv, observation_space=space) for space in spaces]


def vector_over(env_fns: list[Callable[[], gym.Env]], **vector_kwargs: Any) -> VectorEnv:
    """The pool's view (SyncVectorEnv for the reference) with gymnasium's vector keyword arguments (observation_mode)."""
    if REFERENCE:
        return SyncVectorEnv(env_fns, **vector_kwargs)
    return AsyncEnvPool(env_fns, n_hosts=1).as_gym_vector_env(**vector_kwargs)


def test_invalid_observation_mode():
    """Port of test_observation_mode.py::test_invalid_observation_mode."""
    message = (
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch observation space, "
        "actual got invalid"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        vector_over(box_envs(*[Box(0, 1, (5,))] * 3), observation_mode="invalid")


def test_obs_mode_same_different_spaces():
    """Port of test_observation_mode.py::test_obs_mode_same_different_spaces: envs whose spaces differ are refused, in
    gymnasium's words."""
    message = (
        "the sub-environments observation spaces are not equivalent. .*"
        "If this is intentional, use `observation_mode='different'` instead."
    )
    with pytest.raises((AssertionError, RuntimeError), match=message):
        vector_over(box_envs(*[Box(0, i, (2,)) for i in range(1, 4)]), observation_mode="same")


@pytest.mark.parametrize(
    "observation_mode",
    ["different", (Box(0, np.repeat(np.arange(1, 4), 5).reshape((3, 5)), (3, 5)), Box(0, 1, (5,)))],
    ids=["different", "custom"],
)
def test_obs_mode_different_different_spaces(observation_mode):
    """Port of test_observation_mode.py::test_obs_mode_different_different_spaces."""
    spaces = [Box(0, i, (5,)) for i in range(1, 4)]
    envs = vector_over(box_envs(*spaces), observation_mode=observation_mode)
    try:
        assert envs.observation_space == batch_differing_spaces(spaces)
        assert envs.single_observation_space == spaces[0]
        envs.reset()
        envs.step(envs.action_space.sample())
    finally:
        envs.close()


@pytest.mark.parametrize("observation_mode", ["same", "different", "custom"])
def test_obs_mode_different_different_shapes(observation_mode):
    """Port of test_observation_mode.py::test_obs_mode_different_different_shapes: envs whose observation shapes
    differ are refused whatever the mode."""
    if observation_mode == "custom":
        observation_mode = (Box(0, 4, (3, 5)), Box(0, 4, (5,)))
    with pytest.raises((AssertionError, RuntimeError, ValueError)):
        vector_over(box_envs(*[Box(0, 1, (i + 1,)) for i in range(3)]), **view_mode(observation_mode))


@pytest.mark.parametrize("observation_mode", ["same", "different", "custom"])
def test_mixed_observation_spaces(observation_mode):
    """Port of test_observation_mode.py::test_mixed_observation_spaces: envs with spaces of different kinds are refused
    whatever the mode."""
    if observation_mode == "custom":
        observation_mode = (Box(0, 4, (3, 5)), Box(0, 4, (5,)))
    spaces = [Box(0, 1, (3,)), Discrete(5), Dict({"a": Discrete(2), "b": Box(0, 1, (2,))})]
    with pytest.raises((AssertionError, RuntimeError, TypeError)):
        vector_over(box_envs(*spaces), **view_mode(observation_mode))


def view_mode(observation_mode: Any) -> dict[str, Any]:
    """The keyword arguments of a vector env in ``observation_mode`` (the pool's view takes gymnasium's modes)."""
    return {"observation_mode": observation_mode}


def test_varying_spaces():
    """Port of utils/test_space_utils.py::test_varying_spaces (batch_differing_spaces of Boxes of different bounds), on
    the view over envs with such spaces."""
    spaces = [Box(0, 1, (2,), np.float32), Box(2, np.array([3, 5], dtype=np.float32))]
    envs = vector_over(box_envs(*spaces), observation_mode="different")
    try:
        assert envs.observation_space == Box(np.array([[0, 0], [2, 2]]), np.array([[1, 1], [3, 5]]))
        for sub_space, value in zip(spaces, iterate(envs.observation_space, envs.observation_space.sample())):
            assert value in sub_space
        obs, _ = envs.reset()
        assert obs in envs.observation_space
    finally:
        envs.close()


@pytest.mark.parametrize(
    "spaces, dtype",
    [
        ([Discrete(2), Discrete(3)], np.int64),
        ([Discrete(2, dtype=np.int16), Discrete(3, dtype=np.int32)], np.int32),
        ([Discrete(2, dtype=np.int32), Discrete(3), Discrete(1, dtype=np.int8)], np.int64),
        ([Discrete(1, dtype=np.int8), Discrete(5, dtype=np.int16)], np.int16),
    ],
    ids=str,
)
def test_batch_differing_discrete_spaces_dtype(spaces, dtype):
    """Port of utils/test_space_utils.py::test_batch_differing_discrete_spaces_dtype (the dtype batch_differing_spaces
    gives Discrete spaces), on a vector env over envs with such spaces: the batch has their dtype; gymnasium's vector
    envs refuse envs whose dtypes differ (observation_mode='different' needs the same shape and dtype), as the pool
    does."""
    if len({space.dtype for space in spaces}) > 1:
        with pytest.raises(RuntimeError):
            vector_over(box_envs(*spaces), **view_mode("different"))
        return
    envs = vector_over(box_envs(*spaces), observation_mode="different")
    try:
        assert envs.observation_space.dtype == dtype
        obs, _ = envs.reset()
        assert obs.dtype == dtype
    finally:
        envs.close()


def test_non_space_observation_space():
    """Port of utils/test_space_utils.py::test_non_space (batch_space of something not a Space: TypeError), on the view
    over an env whose observation space is not a gymnasium Space."""
    with pytest.raises(TypeError):
        vector_over([functools.partial(FnEnv, observation_space="space")] * 2)


# ------------------------------------------------------------------------------------ tests/vector/test_vector_wrapper
class ResetCounter(VectorWrapper):
    """A vector wrapper that counts the resets (test_vector_wrapper.py's DummyVectorWrapper)."""

    def __init__(self, env: VectorEnv):
        super().__init__(env)
        self.counter = 0

    def reset(self, *, seed: Any = None, options: dict | None = None) -> tuple[Any, dict[str, Any]]:
        self.counter += 1
        return super().reset(seed=seed, options=options)


def test_vector_env_wrapper_inheritance(make_vector):
    """Port of test_vector_wrapper.py::test_vector_env_wrapper_inheritance."""
    wrapped = ResetCounter(make_vector([seeded_env("FrozenLake-v1", 0)]))
    wrapped.reset()
    assert wrapped.counter == 1


def test_vector_env_wrapper_attributes(make_vector):
    """Port of test_vector_wrapper.py::test_vector_env_wrapper_attributes: call, set_attr and get_attr through a
    wrapper's env."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(3)])
    wrapped = ResetCounter(make_vector([seeded_env("CartPole-v1", i) for i in range(3)]))
    assert np.allclose(wrapped.env.call("gravity"), envs.call("gravity"))
    envs.set_attr("gravity", [20.0, 20.0, 20.0])
    wrapped.env.set_attr("gravity", [20.0, 20.0, 20.0])
    assert np.allclose(wrapped.env.get_attr("gravity"), envs.get_attr("gravity"))
    assert wrapped.env.get_attr("gravity") == (20.0, 20.0, 20.0)


def test_vector_env_metadata(make_vector):
    """Port of test_vector_wrapper.py::test_vector_env_metadata: a wrapper forwards the metadata; the view's metadata
    can be replaced."""
    envs = make_vector([seeded_env("CartPole-v1", i) for i in range(3)])
    inner = make_vector([seeded_env("CartPole-v1", i) for i in range(3)])
    wrapped = ResetCounter(inner)
    assert envs.metadata == wrapped.metadata
    envs.metadata = {"render_modes": ["rgb_array"]}
    assert envs.metadata != wrapped.metadata
    inner.metadata = {"render_modes": ["rgb_array"]}
    assert wrapped.metadata == envs.metadata
