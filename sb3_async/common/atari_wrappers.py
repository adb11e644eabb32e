"""SB3's Atari preprocessing with a faster frame skip.

:class:`AtariWrapper` is SB3's ``AtariWrapper`` (the same arguments, wrappers and observations: no-op starts, an
action repeat of 4 with the max over the last two frames, end of life as end of episode, FIRE on reset, 84x84 grey
frames, sign-clipped rewards) with :class:`MaxAndSkipEnv` as its frame skip. That one returns what SB3's
``MaxAndSkipEnv`` returns, element for element, without reading the screen of the frames it drops: of the 4 frames
of a step, ale-py's env copies out the screen of each (a 100 KB RGB image, about a third of the time the emulator
takes for a frame), SB3's wrapper keeps the last two. Ours has the env read its 128 bytes of RAM instead for the
others, so an env step copies two screens where SB3's copies four.

Use it wherever SB3's is used: ``env_wrapper: sb3_async.common.atari_wrappers.AtariWrapper`` in a zoo config, or
:func:`make_atari_env` in place of SB3's ``make_atari_env``; it works with SB3's own algorithms as well.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from stable_baselines3.common import atari_wrappers as sb3_atari
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

#: wrappers whose ``step`` does not look at the observation: they may sit between the frame skip and the ale-py env.
#: By name: the RL Zoo replaces gymnasium's ``TimeLimit`` by its own subclass when it is imported.
_BLIND = frozenset(
    [
        ("gymnasium.wrappers.common", "OrderEnforcing"),
        ("gymnasium.wrappers.common", "PassiveEnvChecker"),
        ("gymnasium.wrappers.common", "TimeLimit"),
        ("rl_zoo3.gym_patches", "PatchedTimeLimit"),
        ("stable_baselines3.common.monitor", "Monitor"),
        ("stable_baselines3.common.atari_wrappers", "NoopResetEnv"),
        ("stable_baselines3.common.atari_wrappers", "StickyActionEnv"),
    ]
)


def _screen_env(env: gym.Env) -> Any:
    """The ale-py env under ``env`` if only wrappers that never read the observation of a step lie between and its
    observation is the screen (``obs_type`` RGB or grey, no sound), else None."""
    while isinstance(env, gym.Wrapper):
        if (type(env).__module__, type(env).__qualname__) not in _BLIND:
            return None
        env = env.env
    screen = getattr(env, "_obs_type", None) in ("rgb", "grayscale") and hasattr(env, "ale")
    return env if screen and isinstance(env.observation_space, gym.spaces.Box) else None


class MaxAndSkipEnv(sb3_atari.MaxAndSkipEnv):
    """SB3's ``MaxAndSkipEnv`` (repeat the action ``skip`` times, sum the rewards, return the max of the last two
    frames) that spares the ale-py env the screen reads of the frames it drops.

    For those frames it switches the env's observation to its RAM (ale-py's ``AtariEnv`` reads ``_obs_type`` at each
    step; it is restored before the kept frames). It does so only where every wrapper between them never reads a
    step's observation (``OrderEnforcing``, ``PassiveEnvChecker``, ``TimeLimit`` and the RL Zoo's, ``Monitor``,
    ``NoopResetEnv``, ``StickyActionEnv``) and from the second step on (``PassiveEnvChecker`` checks the first);
    elsewhere it is SB3's.

    :param env: the env to wrap
    :param skip: the number of times each action is repeated
    """

    def __init__(self, env: gym.Env, skip: int = 4) -> None:
        super().__init__(env, skip=skip)
        self._atari_env = _screen_env(env)
        self._first_step = True

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_first_step": True}  # a copy's wrappers may check their first step again

    def step(self, action: int) -> sb3_atari.AtariStepReturn:
        atari = self._atari_env
        if atari is None or self._first_step:
            result = super().step(action)
            self._first_step = False
            return result
        obs_type, dropped = atari._obs_type, self._skip - 2
        total_reward = 0.0
        try:
            for i in range(self._skip):
                atari._obs_type = "ram" if i < dropped else obs_type
                obs, reward, terminated, truncated, info = self.env.step(action)
                if i >= dropped:
                    self._obs_buffer[i - dropped] = obs
                total_reward += float(reward)
                if terminated or truncated:
                    break
        finally:
            atari._obs_type = obs_type
        return self._obs_buffer.max(axis=0), total_reward, terminated, truncated, info


class AtariWrapper(sb3_atari.AtariWrapper):
    """SB3's ``AtariWrapper`` (same arguments and defaults: SB3's docstring) with :class:`MaxAndSkipEnv` as its frame
    skip: the same observations, rewards and ends of episode in less time."""

    def __init__(self, env: gym.Env, *args: Any, **kwargs: Any) -> None:
        super().__init__(env, *args, **kwargs)
        wrapper: Any = self
        while isinstance(wrapper, gym.Wrapper):
            inner = wrapper.env
            if type(inner) is sb3_atari.MaxAndSkipEnv:
                wrapper.env = MaxAndSkipEnv(inner.env, skip=inner._skip)
                break
            wrapper = inner


def make_atari_env(env_id: str | Any, n_envs: int = 1, seed: int | None = None, **kwargs: Any) -> VecEnv:
    """SB3's ``make_atari_env`` (same arguments) with :class:`AtariWrapper`: ``n_envs`` Atari envs, each in a
    ``Monitor`` and this package's ``AtariWrapper`` (``wrapper_kwargs``), in a ``DummyVecEnv`` unless
    ``vec_env_cls`` says otherwise."""
    return make_vec_env(env_id, n_envs=n_envs, seed=seed, wrapper_class=AtariWrapper, **kwargs)
