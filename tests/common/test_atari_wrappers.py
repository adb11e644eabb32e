"""``sb3_async.common.atari_wrappers``: the same steps as SB3's ``AtariWrapper``, element for element."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common import atari_wrappers as sb3_atari
from stable_baselines3.common.env_util import make_atari_env as sb3_make_atari_env

from sb3_async.common.atari_wrappers import AtariWrapper, MaxAndSkipEnv, make_atari_env

ale_py = pytest.importorskip("ale_py")
gym.register_envs(ale_py)


def frame_skip_of(env: gym.Env) -> MaxAndSkipEnv:
    wrapper = env
    while not isinstance(wrapper, sb3_atari.MaxAndSkipEnv):
        wrapper = wrapper.env  # type: ignore[attr-defined]
    assert isinstance(wrapper, MaxAndSkipEnv)
    return wrapper


def assert_same_steps(theirs: gym.Env, ours: gym.Env, n_steps: int) -> tuple[int, int]:
    """Steps SB3's wrapper and ours side by side with the same actions; returns the episodes and the game overs."""
    obs_theirs, info_theirs = theirs.reset(seed=3)
    obs_ours, info_ours = ours.reset(seed=3)
    np.testing.assert_array_equal(obs_ours, obs_theirs)
    rng = np.random.default_rng(0)
    episodes = game_overs = 0
    for step in range(n_steps):
        action = int(rng.integers(theirs.action_space.n))
        expected, got = theirs.step(action), ours.step(action)
        np.testing.assert_array_equal(got[0], expected[0], err_msg=f"observation at step {step}")
        assert got[1:4] == expected[1:4], f"step {step}"
        assert type(got[1]) is type(expected[1]) and type(got[2]) is type(expected[2])
        expected_info, info = dict(expected[4]), dict(got[4])
        if "episode" in expected_info:  # a Monitor under the wrapper: the whole game's return and length in frames
            episode, expected_episode = info.pop("episode"), expected_info.pop("episode")
            assert (episode["r"], episode["l"]) == (expected_episode["r"], expected_episode["l"])
        assert info == expected_info, f"step {step}"
        if expected[2] or expected[3]:
            episodes += 1
            game_overs += theirs.unwrapped.ale.game_over()  # type: ignore[attr-defined]
            obs_theirs, info_theirs = theirs.reset()
            obs_ours, info_ours = ours.reset()
            np.testing.assert_array_equal(obs_ours, obs_theirs)
            assert info_ours == info_theirs
    return episodes, game_overs


def pair(env_id: str, **make_kwargs) -> tuple[gym.Env, gym.Env]:
    return sb3_atari.AtariWrapper(gym.make(env_id, **make_kwargs)), AtariWrapper(gym.make(env_id, **make_kwargs))


def test_same_steps_through_lives_and_game_overs():
    # Breakout: FIRE on reset, 5 lives (end of life ends an episode), games that end at any of the 4 frames of a step
    theirs, ours = pair("BreakoutNoFrameskip-v4")
    episodes, game_overs = assert_same_steps(theirs, ours, 2500)
    assert frame_skip_of(ours)._atari_env is ours.unwrapped, "the screen reads are skipped on a NoFrameskip-v4 env"
    assert episodes > 20 and game_overs > 3


def test_same_steps_with_a_monitor_under_the_wrapper():
    # SB3's make_atari_env (and the RL Zoo) put the Monitor under the AtariWrapper: it records whole games in frames
    theirs, ours = sb3_make_atari_env("BreakoutNoFrameskip-v4").envs[0], make_atari_env("BreakoutNoFrameskip-v4").envs[0]
    episodes, game_overs = assert_same_steps(theirs, ours, 1500)
    assert frame_skip_of(ours)._atari_env is not None and game_overs > 1


@pytest.mark.parametrize(
    "env_id, make_kwargs, skips_reads",
    [
        ("BreakoutNoFrameskip-v4", dict(obs_type="grayscale"), True),
        ("PongNoFrameskip-v4", dict(max_episode_steps=150), True),  # a TimeLimit under the frame skip
        ("BreakoutNoFrameskip-v4", dict(repeat_action_probability=0.25), True),  # sticky actions inside the ALE
        ("ALE/Breakout-v5", {}, True),  # a frame skip of 4 inside the env, and sticky actions
        ("BreakoutNoFrameskip-v4", dict(obs_type="ram"), False),
    ],
)
def test_other_envs_and_stacks(env_id, make_kwargs, skips_reads):
    if "obs_type" in make_kwargs:  # not RGB: SB3's AtariWrapper does not apply, the frame skip alone does
        theirs, ours = sb3_atari.MaxAndSkipEnv(gym.make(env_id, **make_kwargs)), MaxAndSkipEnv(gym.make(env_id, **make_kwargs))
    else:
        theirs, ours = pair(env_id, **make_kwargs)
    episodes, _ = assert_same_steps(theirs, ours, 500)
    assert (frame_skip_of(ours)._atari_env is not None) == skips_reads
    assert episodes > 0


def test_the_zoos_time_limit_lets_the_reads_be_skipped():
    from rl_zoo3.gym_patches import PatchedTimeLimit  # what gym.make wraps envs in once the RL Zoo is imported

    theirs, ours = (
        wrapper(PatchedTimeLimit(gym.make("PongNoFrameskip-v4"), 150)) for wrapper in (sb3_atari.AtariWrapper, AtariWrapper)
    )
    episodes, _ = assert_same_steps(theirs, ours, 200)
    assert frame_skip_of(ours)._atari_env is ours.unwrapped and episodes > 0


def test_a_wrapper_that_may_read_observations_keeps_sb3s_path():
    class Seeing(gym.Wrapper):
        pass

    ours = AtariWrapper(Seeing(gym.make("PongNoFrameskip-v4")))
    assert frame_skip_of(ours)._atari_env is None
    theirs = sb3_atari.AtariWrapper(Seeing(gym.make("PongNoFrameskip-v4")))
    assert_same_steps(theirs, ours, 50)


@pytest.mark.filterwarnings("error::UserWarning")  # PassiveEnvChecker: the first step's observation is the screen
def test_first_step_checks_and_copies():
    env = MaxAndSkipEnv(gym.make("BreakoutNoFrameskip-v4", obs_type="grayscale"))
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(1)
    assert frame_skip_of(env).unwrapped._obs_type == "grayscale"  # restored after each step
    copy = pickle.loads(pickle.dumps(env))
    assert frame_skip_of(copy)._atari_env is copy.unwrapped
    copy.reset(seed=0)
    copy.step(1)
    assert copy.unwrapped._obs_type == "grayscale"


def test_make_atari_env_uses_this_wrapper():
    venv = make_atari_env("PongNoFrameskip-v4", n_envs=2, seed=0, wrapper_kwargs=dict(frame_skip=4))
    assert venv.num_envs == 2 and venv.observation_space.shape == (84, 84, 1)
    assert all(isinstance(frame_skip_of(env), MaxAndSkipEnv) for env in venv.envs)  # type: ignore[attr-defined]
    venv.reset()
    obs, rewards, dones, _ = venv.step(np.array([0, 1]))
    assert obs.shape == (2, 84, 84, 1) and rewards.shape == (2,)
    venv.close()
