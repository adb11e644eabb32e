"""AsyncEnvPool.as_gym_vector_env() side by side with gymnasium's SyncVectorEnv on the same envs and seeds, in each
autoreset mode; gymnasium's vector wrappers on top; a CleanRL-style PPO loop on it."""

from __future__ import annotations

import functools
import re
import sys

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from sb3_async import AsyncEnvPool
from sb3_async.env_pool import EnvError, PoolVectorEnv
from tests.space_envs import KINDS, assert_same, space_env_factories

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_ENVS = 3
LAYOUTS = [{"n_hosts": 2}, {"n_hosts": 0}, {"n_hosts": 1, "local_envs": 1}]
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


def pool_view(factories, mode: AutoresetMode, **layout) -> PoolVectorEnv:
    return AsyncEnvPool(factories, autoreset=mode != AutoresetMode.DISABLED, **layout).as_gym_vector_env(mode)


def run_side_by_side(ours: VectorEnv, theirs: VectorEnv, steps: int, mode: AutoresetMode) -> int:
    """Reset and step both with the same actions (DISABLED: resetting the ended envs with a mask); returns the number of
    episode ends."""
    assert_same(ours.reset(seed=5, options={"start": 1.0}), theirs.reset(seed=5, options={"start": 1.0}), "reset")
    ours.action_space.seed(0)
    ends = 0
    for t in range(steps):
        actions = ours.action_space.sample()
        a, b = ours.step(actions), theirs.step(actions)
        assert_same(a, b, f"step {t}")  # obs, float64 rewards, terminations, truncations, infos
        done = b[2] | b[3]
        ends += int(done.sum())
        if mode == AutoresetMode.DISABLED and done.any():
            seeds = [100 + t + i for i in range(N_ENVS)]
            options = {"reset_mask": done.copy(), "start": -1.0}
            assert_same(ours.reset(seed=seeds, options=dict(options)), theirs.reset(seed=seeds, options=options), "mask")
    return ends


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize("obs, act", [("box", "box"), ("discrete", "multidiscrete"), ("dict", "tuple"), ("tuple", "dict")])
def test_the_view_gives_sync_vector_env_results(mode, obs, act):
    for layout in LAYOUTS:
        ours = pool_view(space_env_factories(N_ENVS, obs, act), mode, **layout)
        theirs = SyncVectorEnv(space_env_factories(N_ENVS, obs, act), autoreset_mode=mode)
        try:
            assert ours.num_envs == theirs.num_envs
            for name in ("single_observation_space", "single_action_space", "observation_space", "action_space"):
                assert getattr(ours, name) == getattr(theirs, name), name
            assert ours.metadata == theirs.metadata and ours.metadata["autoreset_mode"] == mode
            assert ours.render_mode == theirs.render_mode
            assert run_side_by_side(ours, theirs, 20, mode) >= 8
        finally:
            ours.close()
            theirs.close()
        assert ours.closed and ours.pool.closed


@pytest.mark.parametrize("kind", [kind for kind in KINDS if kind not in ("box", "discrete", "dict", "tuple")])
def test_the_other_spaces_in_same_step_and_next_step(kind):
    for mode in MODES[:2]:
        ours = pool_view(space_env_factories(N_ENVS, kind, kind), mode, n_hosts=1)
        theirs = SyncVectorEnv(space_env_factories(N_ENVS, kind, kind), autoreset_mode=mode)
        try:
            assert run_side_by_side(ours, theirs, 15, mode) >= 5
        finally:
            ours.close()
            theirs.close()


def test_seeds_as_a_list_and_reset_masks_in_next_step_mode():
    ours = pool_view(space_env_factories(N_ENVS), AutoresetMode.NEXT_STEP, n_hosts=2)
    theirs = SyncVectorEnv(space_env_factories(N_ENVS))
    try:
        assert_same(ours.reset(seed=[4, 7, 6]), theirs.reset(seed=[4, 7, 6]))
        for t in range(12):  # some envs end and autoreset at the next step, then a mask resets env 1 in the middle
            actions = np.zeros((N_ENVS, 3), np.float32)
            assert_same(ours.step(actions), theirs.step(actions), f"step {t}")
            if t == 5:
                mask = np.array([False, True, False])
                expected = theirs.reset(seed=9, options={"reset_mask": mask.copy()})
                assert_same(ours.reset(seed=9, options={"reset_mask": mask}), expected, "masked reset")
    finally:
        ours.close()
        theirs.close()


def test_call_get_attr_set_attr_and_render_as_sync_vector_env():
    ours = pool_view(space_env_factories(N_ENVS, render_mode="rgb_array"), AutoresetMode.SAME_STEP, n_hosts=2)
    theirs = SyncVectorEnv(space_env_factories(N_ENVS, render_mode="rgb_array"), autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        for venv in (ours, theirs):
            venv.reset(seed=0)
            venv.step(np.zeros((N_ENVS, 3), np.float32))
        assert_same(ours.call("describe", 2, offset=1), theirs.call("describe", 2, offset=1))
        assert_same(ours.call("marker"), theirs.call("marker"))  # an attribute: its value
        assert_same(ours.get_attr("index"), theirs.get_attr("index"))
        assert_same(ours.render(), theirs.render())
        for values in ([1, 2, 3], (4, 5, 6), 9):
            ours.set_attr("marker", values)
            theirs.set_attr("marker", values)
            # set on the wrapper that has it (the inner env here), as gymnasium's set_wrapper_attr
            assert_same(ours.call("describe"), theirs.call("describe"))
        for venv in (ours, theirs):
            with pytest.raises(ValueError, match="3 envs|number of environments"):
                venv.set_attr("marker", [1, 2])
        with pytest.raises(AttributeError):
            ours.get_attr("no_such_thing")
        with pytest.raises(EnvError, match="no_such_method"):
            ours.call("no_such_method")
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("mode", MODES[:2], ids=lambda m: m.value)
def test_gymnasium_vector_wrappers_on_top(mode):
    """RecordEpisodeStatistics reads metadata["autoreset_mode"] to count episodes; the same episodes either way."""
    ours = RecordEpisodeStatistics(pool_view(space_env_factories(N_ENVS), mode, n_hosts=2))
    theirs = RecordEpisodeStatistics(SyncVectorEnv(space_env_factories(N_ENVS), autoreset_mode=mode))
    try:
        ours.reset(seed=2)
        theirs.reset(seed=2)
        episodes = 0
        for _ in range(20):
            actions = np.full((N_ENVS, 3), 0.2, np.float32)
            *_, infos = ours.step(actions)
            *_, expected = theirs.step(actions)
            assert ("episode" in infos) == ("episode" in expected)
            if "episode" in expected:
                episodes += int(expected["_episode"].sum())
                for key in ("r", "l"):
                    assert_same(infos["episode"][key], expected["episode"][key])
        assert episodes >= 5
        assert list(ours.return_queue) == list(theirs.return_queue)
    finally:
        ours.close()
        theirs.close()


def test_bad_modes_and_actions_raise_clear_errors():
    with AsyncEnvPool(space_env_factories(2), n_hosts=0) as pool:
        with pytest.raises(ValueError, match="Invalid autoreset_mode='Sometimes'"):
            pool.as_gym_vector_env("Sometimes")
        with pytest.raises(ValueError, match="DISABLED.*needs an AsyncEnvPool with autoreset=False"):
            pool.as_gym_vector_env(AutoresetMode.DISABLED)
        venv = pool.as_gym_vector_env("SameStep")
        assert venv.autoreset_mode == AutoresetMode.SAME_STEP
        venv.reset(seed=0)
        with pytest.raises(ValueError, match="for env 1: not in the action space"):
            venv.step(np.array([[0, 0, 0], [0, 0, 99]], np.float32))
        with pytest.raises(ValueError, match="Invalid actions"):
            venv.step(np.zeros((3, 3), np.float32))
        venv.step(np.zeros((2, 3), np.float64))  # float64 actions are cast to the space's float32, as any env would see
        with pytest.raises(ValueError, match="reset_mask"):
            venv.reset(options={"reset_mask": [True, False]})
        with pytest.raises(ValueError, match="Invalid seed"):
            venv.reset(seed=[1, 2, 3])
    with AsyncEnvPool(space_env_factories(2), n_hosts=0, autoreset=False) as pool:
        with pytest.raises(ValueError, match="NEXT_STEP needs an AsyncEnvPool with autoreset=True"):
            pool.as_gym_vector_env()
        venv = pool.as_gym_vector_env(AutoresetMode.DISABLED)
        venv.reset(seed=0)
        for _ in range(8):
            *_, terminations, truncations, _ = venv.step(np.zeros((2, 3), np.float32))
            if (terminations | truncations).any():
                break
        with pytest.raises(ValueError, match="reset_mask"):
            venv.step(np.zeros((2, 3), np.float32))
        venv.reset(options={"reset_mask": terminations | truncations})
        venv.step(np.zeros((2, 3), np.float32))


def test_cleanrl_style_ppo_runs_on_the_view():
    """CleanRL's PPO loop, shrunk: a tiny actor-critic, 4 CartPoles, 2 updates of 128 steps."""
    torch = pytest.importorskip("torch")
    from torch import nn

    n_envs, n_steps = 4, 128
    envs = AsyncEnvPool("CartPole-v1", n_envs=n_envs, n_hosts=2).as_gym_vector_env()
    envs = RecordEpisodeStatistics(envs)
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
    critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=2.5e-4)
    obs_buf = torch.zeros((n_steps, n_envs, 4))
    actions_buf, logprobs, rewards, dones, values = (torch.zeros((n_steps, n_envs)) for _ in range(5))
    next_obs, _ = envs.reset(seed=1)
    next_obs, next_done = torch.as_tensor(next_obs), torch.zeros(n_envs)
    episodes = 0
    try:
        for _update in range(2):
            for step in range(n_steps):
                obs_buf[step], dones[step] = next_obs, next_done
                with torch.no_grad():
                    dist = torch.distributions.Categorical(logits=actor(next_obs))
                    action = dist.sample()
                    logprobs[step], values[step] = dist.log_prob(action), critic(next_obs).flatten()
                actions_buf[step] = action
                next_obs, reward, terminations, truncations, infos = envs.step(action.numpy())
                rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
                next_obs = torch.as_tensor(next_obs)
                next_done = torch.as_tensor(np.logical_or(terminations, truncations), dtype=torch.float32)
                episodes += int(infos.get("_episode", np.zeros(1, bool)).sum())
            with torch.no_grad():  # GAE
                advantages, last = torch.zeros_like(rewards), torch.zeros(n_envs)
                next_value = critic(next_obs).flatten()
                for t in reversed(range(n_steps)):
                    not_done = 1.0 - (next_done if t == n_steps - 1 else dones[t + 1])
                    following = next_value if t == n_steps - 1 else values[t + 1]
                    delta = rewards[t] + 0.99 * following * not_done - values[t]
                    advantages[t] = last = delta + 0.99 * 0.95 * not_done * last
                returns = advantages + values
            dist = torch.distributions.Categorical(logits=actor(obs_buf.reshape(-1, 4)))
            ratio = (dist.log_prob(actions_buf.reshape(-1)) - logprobs.reshape(-1)).exp()
            adv = advantages.reshape(-1)
            policy_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
            value_loss = ((critic(obs_buf.reshape(-1, 4)).flatten() - returns.reshape(-1)) ** 2).mean()
            loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            assert torch.isfinite(loss)
        assert episodes > 0
    finally:
        envs.close()


def test_a_batch_of_the_wrong_shape_names_the_expected_and_the_given_shapes():
    make = functools.partial(gym.make, "Pendulum-v1")
    with AsyncEnvPool([make] * 2, n_hosts=0) as pool:
        venv = pool.as_gym_vector_env()
        venv.reset(seed=0)
        for given in [(3, 1), (2,)]:
            with pytest.raises(ValueError, match=rf"expected shape \(2, 1\) .*, given shape {re.escape(str(given))}"):
                venv.step(np.zeros(given, np.float32))
        with pytest.raises(ValueError, match=r"expected numbers for Box.*, given a <U1 array"):
            venv.step(np.array([["a"], ["b"]]))


def test_errors_are_also_gymnasiums_types():
    """Code written for gymnasium's vector envs catches the view's errors (they keep the pool's types too)."""
    from gymnasium.error import ClosedEnvironmentError

    make = functools.partial(gym.make, "CartPole-v1")
    vec = AsyncEnvPool([make] * 2, n_hosts=0).as_gym_vector_env()
    vec.reset(seed=0)
    with pytest.raises(TypeError, match="Invalid actions"):
        vec.step(np.zeros(3, dtype=np.int64))  # a batch of the wrong size
    with pytest.raises(TypeError, match="reset_mask"):
        vec.reset(options={"reset_mask": np.ones(2, dtype=np.int64)})
    vec.close()
    with pytest.raises(ClosedEnvironmentError):
        vec.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(RuntimeError, match="has observation space"):
        AsyncEnvPool([make, functools.partial(gym.make, "MountainCarContinuous-v0")], n_hosts=0)


def test_next_step_autoreset_ignores_the_resetting_envs_action():
    """As SyncVectorEnv: the env that resets at this step ignores its action, even one outside the space."""
    vec = AsyncEnvPool([functools.partial(gym.make, "CartPole-v1")] * 2, n_hosts=0).as_gym_vector_env()
    try:
        vec.reset(seed=0)
        for _ in range(500):
            _, _, terminated, truncated, _ = vec.step(np.zeros(2, dtype=np.int64))
            if (terminated | truncated).any():
                break
        ended = int(np.flatnonzero(terminated | truncated)[0])
        actions = np.zeros(2, dtype=np.int64)
        actions[ended] = 7  # outside Discrete(2): ignored at the reset step
        vec.step(actions)
        with pytest.raises(ValueError, match=rf"Invalid action .*7.* for env {ended}"):
            vec.step(actions)  # now it is stepped: refused
    finally:
        vec.close()


class _RaisesOnStep(gym.Wrapper):
    """An env whose step raises an exception with a message of several lines, of a type of its own module."""

    def step(self, action):
        raise gym.error.InvalidAction("first line\nlast line: not a type name")


def test_an_env_exception_keeps_its_type_whatever_its_message():
    """The worker names the type it raised: the view raises an EnvError of that type too, even when the message's last
    line looks like nothing (or like another type)."""
    with AsyncEnvPool([lambda: _RaisesOnStep(gym.make("CartPole-v1"))] * 2, n_hosts=1) as pool:
        envs = pool.as_gym_vector_env()
        envs.reset(seed=0)
        with pytest.raises(gym.error.InvalidAction, match="first line") as caught:
            envs.step(np.zeros(2, dtype=np.int64))
        assert isinstance(caught.value, EnvError) and caught.value.env_id == 0
