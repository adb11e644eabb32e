"""Giving every worker its own copies of the user's environment.

Users pass an env the way they do to SB3: an env id, a factory, a ``gym.Env`` or a ``VecEnv``. Workers cannot share
the main process' env, so :class:`EnvRecipe` records how to build more of it: rebuild from the id or the factory,
else clone the env by (cloud)pickling. A ``VecEnv`` is taken apart into one env to clone plus the ``VecEnvWrapper``
stack to re-apply (``VecFrameStack``, ``VecMonitor``, ``VecTransposeImage``, and ``VecNormalize``, whose
statistics the workers share: :mod:`sb3_async.common.normalization`). Anything else fails at construction with an
error that says what to pass instead.

A multi-agent PettingZoo env (a factory returning one, or an ``AsyncEnvPool`` of one, or its ``as_vec_env()``) is
stepped in each worker as a :class:`~sb3_async.env_pool.vec_env.PoolVecEnv` over env copies in the worker's own
process, one env slot per agent (:mod:`sb3_async.env_pool.multi_agent`): the worker's ``n_envs`` is its slots. A
turn-based PettingZoo game (the AEC envs of ``pettingzoo.classic``) is one env, a
:class:`~sb3_async.env_pool.turns.TurnBasedGame` whose other seats the worker's policy plays (self-play). An
``AsyncEnvPool`` of gymnasium envs gives its factory.
"""

from __future__ import annotations

import importlib
import io
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecEnv,
    VecEnvWrapper,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn
from stable_baselines3.common.vec_env.util import dict_to_obs

from sb3_async.common.normalization import attach_statistics, vec_normalize_options, vec_normalizes
from sb3_async.env_pool.multi_agent import is_multi_agent
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.turns import TurnBasedGame, is_turn_based
from sb3_async.env_pool.vec_env import PoolVecEnv
from sb3_async.runtime.processes import StepWatch

_WHAT_TO_PASS = (
    "Pass an env id (e.g. 'CartPole-v1'), a picklable factory (e.g. `lambda: gym.make('CartPole-v1')`), "
    "a picklable gym.Env, or a DummyVecEnv of picklable envs; each worker builds its own copies from it."
)


def _rebuild_frame_stack(wrapper: VecFrameStack) -> tuple[type, dict[str, Any]]:
    stacked = wrapper.stacked_obs
    if not hasattr(stacked, "channels_first"):
        raise TypeError(f"VecFrameStack over a Dict observation space cannot be given to workers. {_WHAT_TO_PASS}")
    return VecFrameStack, {"n_stack": stacked.n_stack, "channels_order": "first" if stacked.channels_first else "last"}


class WorkerVecEnv(DummyVecEnv):
    """``DummyVecEnv`` without its per-step deep copies: a worker consumes each step's infos and observations once
    and never mutates them, so shallow copies are enough (the deep copies cost more than a CartPole step)."""

    _watchdog: StepWatch | None = None
    _labels: Sequence[str] = ()
    _terminal_masks = False

    def keep_terminal_masks(self) -> None:
        """Keep the action mask of each episode's last observation (``action_masks()`` before the reset) in the step's
        info, as ``"terminal_action_mask"`` (:mod:`sb3_async.common.masks`): a time-limit bootstrap maxes over it."""
        self._terminal_masks = True

    def watch_steps(self, watchdog: StepWatch, labels: Sequence[str]) -> None:
        """Bracket each env's step (and the reset after its episode ends) for ``watchdog``, naming env ``i``
        ``labels[i]``: a step stuck past its timeout is interrupted with a ``StepTimeout`` naming the env."""
        self._watchdog, self._labels = watchdog, list(labels)

    def close(self) -> None:
        if self._watchdog is not None:  # its thread ends with the envs it watched
            self._watchdog.stop()
            self._watchdog = None
        super().close()

    def step_wait(self) -> Any:
        watchdog = self._watchdog
        for env_idx in range(self.num_envs):
            if watchdog is not None:
                watchdog.begin(self._labels[env_idx])
            obs, self.buf_rews[env_idx], terminated, truncated, info = self.envs[env_idx].step(self.actions[env_idx])
            self.buf_dones[env_idx] = terminated or truncated
            info["TimeLimit.truncated"] = truncated and not terminated
            if self.buf_dones[env_idx]:
                info["terminal_observation"] = obs
                if self._terminal_masks:
                    info["terminal_action_mask"] = self.envs[env_idx].get_wrapper_attr("action_masks")()
                obs, self.reset_infos[env_idx] = self.envs[env_idx].reset()
            if watchdog is not None:
                watchdog.end()
            self.buf_infos[env_idx] = info
            self._save_obs(env_idx, obs)
        return self._obs_from_buf(), self.buf_rews.copy(), self.buf_dones.copy(), list(self.buf_infos)

    def _obs_from_buf(self) -> Any:
        return dict_to_obs(self.observation_space, {key: value.copy() for key, value in self.buf_obs.items()})


class ChannelsFirstFrameStack(VecEnvWrapper):
    """``VecTransposeImage(VecFrameStack(venv, n_stack, channels_order="last"))`` in one wrapper, for a ``venv`` of
    channel-last images: the same observations (channel-first views of channel-last arrays, as SB3's pair gives
    them), observation space and terminal observations, element for element.

    SB3's pair rolls the whole stack each step, a copy with a stride of one byte per pixel. For the common case of
    single-channel byte frames (grey Atari frames, ``n_stack`` 2, 4 or 8) this wrapper shifts each pixel's stack as one
    little-endian integer instead: the oldest frame's byte shifts out, the new frame's byte shifts in.

    :param venv: a ``VecEnv`` whose observation space is a channel-last image ``Box``
    :param n_stack: frames stacked
    """

    def __init__(self, venv: VecEnv, n_stack: int):
        space = venv.observation_space
        if not _stacks_to_channel_last_image(space, n_stack):
            raise TypeError(
                f"ChannelsFirstFrameStack needs channel-last image observations that stay so when {n_stack} are stacked, "
                f"got {space}"
            )
        assert isinstance(space, gym.spaces.Box)
        stacked_space = _stacked(space, n_stack)
        super().__init__(venv, observation_space=VecTransposeImage.transpose_space(stacked_space))
        self.channels, self.depth = space.shape[-1], stacked_space.shape[-1]
        self.stack = np.zeros((self.num_envs, *stacked_space.shape), dtype=space.dtype)  # channel-last
        packed = np.dtype(f"<u{n_stack}") if n_stack in (2, 4, 8) else None
        #: each pixel's stack as one integer, where that layout holds (one byte per frame, little-endian)
        self.packed = packed if self.channels == 1 and space.dtype == np.uint8 and sys.byteorder == "little" else None

    def reset(self) -> np.ndarray:
        obs = self.venv.reset()
        self.stack = np.zeros_like(self.stack)
        self.stack[..., -self.channels :] = obs
        return VecTransposeImage.transpose_image(self.stack)

    def _shifted(self, obs: np.ndarray, dones: np.ndarray) -> np.ndarray:
        """A new stack: the newest frames of each env's stack (none where an episode ended), then ``obs``."""
        if self.packed is not None:
            previous = self.stack.view(self.packed)
            shifted = previous >> np.array(8, dtype=self.packed)
            shifted[dones] = 0
            shifted |= obs.astype(self.packed) << np.array(8 * (self.depth - 1), dtype=self.packed)
            return shifted.view(np.uint8)
        channels = self.channels
        stack = np.empty_like(self.stack)
        stack[..., :-channels] = self.stack[..., channels:]
        stack[dones, ..., :-channels] = 0
        stack[..., -channels:] = obs
        return stack

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        assert isinstance(obs, np.ndarray)
        previous, self.stack = self.stack, self._shifted(obs, dones)  # a new array: the caller keeps the old ones
        for env_idx in np.flatnonzero(dones):
            if "terminal_observation" in infos[env_idx]:
                terminal = np.concatenate(
                    (previous[env_idx, ..., self.channels :], infos[env_idx]["terminal_observation"]), axis=-1
                )
                infos[env_idx]["terminal_observation"] = VecTransposeImage.transpose_image(terminal)
        return VecTransposeImage.transpose_image(self.stack), rewards, dones, infos


def _shadowed_class(module_name: str, qualname: str) -> type:
    """The class ``module_name.qualname`` as defined, even if that name now holds a subclass patched over it."""
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    for cls in obj.__mro__:
        if cls.__module__ == module_name and cls.__qualname__ == qualname:
            return cls
    raise AttributeError(f"{module_name}.{qualname} not found")


class _EnvPickler(cloudpickle.CloudPickler):
    """cloudpickle, except for classes that a library replaced by a subclass after the env was built (rl_zoo3's
    ``gym_patches`` does that to gymnasium's ``TimeLimit``): those go by reference to the original class too, instead of
    by value, which breaks their ``super()`` calls in the worker."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) and "<locals>" not in obj.__qualname__:
            module = sys.modules.get(obj.__module__)
            current: Any = module
            for part in obj.__qualname__.split("."):
                current = getattr(current, part, None)
            if current is not obj and isinstance(current, type) and issubclass(current, obj):
                return _shadowed_class, (obj.__module__, obj.__qualname__)
        return super().reducer_override(obj)


class EnvRecipe:
    """How to build the env again in a worker. Picklable (with cloudpickle) and saved with the model.

    :param env: an env id, a factory, a ``gym.Env`` or a ``VecEnv``
    :param env_kwargs: keyword arguments for ``gym.make`` when ``env`` is an id
    """

    def __init__(self, env: Any, env_kwargs: dict[str, Any] | None = None):
        self.env_id: str | None = None
        self.env_spec: gym.envs.registration.EnvSpec | None = None
        self.factory: Callable[[], gym.Env] | None = None
        self.pickled_env: bytes | None = None
        self.vec_wrappers: list[tuple[type, dict[str, Any]]] = []
        self.env_kwargs = dict(env_kwargs or {})
        #: Whether the env is a multi-agent PettingZoo env, and its slots (agents) per env copy (known once one is built)
        self.multi_agent, self.agents_per_env = False, 1
        if isinstance(env, AsyncEnvPool):
            env = PoolVecEnv(env)
        if isinstance(env, str):
            self.env_id = env
            try:  # the spec travels to the workers: ids registered only in this process (by a plugin) still work
                self.env_spec = gym.spec(env)
            except gym.error.Error as error:
                raise ValueError(f"Invalid env={env!r}: {error}") from error
        elif isinstance(env, VecEnv):
            self._from_vec_env(env)
        elif isinstance(env, gym.Env):
            self.pickled_env = self._pickle_env(env)
        elif callable(env):
            self.factory = env
        else:
            raise TypeError(f"Invalid env={env!r} (type {type(env).__name__}). {_WHAT_TO_PASS}")

    @staticmethod
    def _pickle_env(env: gym.Env) -> bytes:
        try:
            buffer = io.BytesIO()
            _EnvPickler(buffer).dump(env)
            blob = buffer.getvalue()
            pickle.loads(blob)
        except Exception as error:
            raise TypeError(
                f"The env {env} cannot be copied to the workers: pickling it failed ({error!r}). {_WHAT_TO_PASS}"
            ) from error
        return blob

    def _from_vec_env(self, venv: VecEnv) -> None:
        wrappers: list[tuple[type, dict[str, Any]]] = []
        while isinstance(venv, VecEnvWrapper):
            if isinstance(venv, VecNormalize):  # rebuilt with the same options; statistics shared at learn()
                if any(cls is VecNormalize for cls, _ in wrappers):
                    raise TypeError("Only one VecNormalize can be given to workers (their statistics are shared)")
                wrappers.append((VecNormalize, vec_normalize_options(venv)))
            elif isinstance(venv, VecFrameStack):
                wrappers.append(_rebuild_frame_stack(venv))
            elif isinstance(venv, VecMonitor):
                wrappers.append((VecMonitor, {}))
            elif not isinstance(venv, VecTransposeImage):  # re-added by SB3's _wrap_env when needed
                raise TypeError(f"The VecEnv wrapper {type(venv).__name__} cannot be rebuilt in the workers. {_WHAT_TO_PASS}")
            venv = venv.venv
        if isinstance(venv, PoolVecEnv) and venv.pool._factories[0] is not None:  # a pool: its env copies' factory
            self.factory = venv.pool._factories[0]
            if venv.pool.env_agents:  # a multi-agent pool
                self.multi_agent, self.agents_per_env = True, venv.pool.agents_per_env
            self.vec_wrappers = list(reversed(wrappers))
            return
        if not isinstance(venv, DummyVecEnv):
            raise TypeError(
                f"A {type(venv).__name__} cannot be given to workers (its envs live in other processes). {_WHAT_TO_PASS}"
            )
        self.pickled_env = self._pickle_env(venv.envs[0])
        self.vec_wrappers = list(reversed(wrappers))

    def describe(self) -> str:
        if self.env_id is not None:
            return self.env_id
        return "factory" if self.factory is not None else "pickled env"

    def make_env(self) -> gym.Env | VecEnv:
        """One new env, wrapped in a ``Monitor`` (episode statistics) unless it already is; for a multi-agent env, one
        env copy as a ``PoolVecEnv`` (one env slot per agent; the copy reports its agents' episodes)."""
        if self.env_spec is not None:
            env = gym.make(self.env_spec, **self.env_kwargs)
        elif self.factory is not None:
            env = self.factory()
            if is_turn_based(env):  # one seat learns, the policy plays the others (self-play)
                env = TurnBasedGame(env)
            elif self.multi_agent or is_multi_agent(env):
                copy = env
                venv = PoolVecEnv(AsyncEnvPool([lambda: copy], n_hosts=0))
                self.multi_agent, self.agents_per_env = True, venv.num_envs
                return venv
            if not isinstance(env, gym.Env):
                raise TypeError(f"The env factory returned {type(env).__name__}, not a gymnasium.Env")
        else:
            assert self.pickled_env is not None
            env = pickle.loads(self.pickled_env)
        if not is_wrapped(env, Monitor):
            env = Monitor(env)
        return env

    @property
    def normalizes(self) -> bool:
        """Whether the recorded wrappers include a ``VecNormalize``."""
        return any(cls is VecNormalize for cls, _ in self.vec_wrappers)

    def make_vec_env(
        self, n_envs: int, seed: int | None = None, shared_statistics: dict[str, Any] | None = None, slot: int | None = None
    ) -> VecEnv:
        """``n_envs`` copies in a ``DummyVecEnv`` with the recorded wrappers, as SB3 would wrap it for the policy.

        :param shared_statistics: a ``VecNormalize`` among the wrappers uses these shared statistics
            (:func:`~sb3_async.common.normalization.share_statistics`), updating slot ``slot``; None: its own
        """
        venv: VecEnv
        if getattr(self, "multi_agent", False):  # a recipe saved before multi-agent envs has no such attribute
            copies, extra = divmod(n_envs, self.agents_per_env)
            if extra or not copies:
                raise ValueError(f"n_envs={n_envs}: a multi-agent env steps whole copies of {self.agents_per_env} agents")
            venv = PoolVecEnv(AsyncEnvPool(self.factory, copies, n_hosts=0))  # type: ignore[arg-type]
        else:
            venv = WorkerVecEnv([self.make_env for _ in range(n_envs)])  # type: ignore[misc]
        if seed is not None:
            venv.seed(seed)
            venv.action_space.seed(seed)
        for index, (cls, kwargs) in enumerate(self.vec_wrappers):
            if _fuse_frame_stack(venv, cls, kwargs, last=index == len(self.vec_wrappers) - 1):
                venv = ChannelsFirstFrameStack(venv, kwargs["n_stack"])  # what SB3 would stack, then transpose
                continue
            venv = cls(venv, **kwargs)
            if cls is VecNormalize and shared_statistics is not None:
                attach_statistics(venv, shared_statistics, slot)  # type: ignore[arg-type]
        return BaseAlgorithm._wrap_env(venv)


def _stacked(space: gym.spaces.Box, n_stack: int) -> gym.spaces.Box:
    """The space of ``n_stack`` observations of ``space`` stacked on their last axis (``VecFrameStack``'s)."""
    low, high = np.repeat(space.low, n_stack, axis=-1), np.repeat(space.high, n_stack, axis=-1)
    return gym.spaces.Box(low=low, high=high, dtype=space.dtype)  # type: ignore[arg-type]


def _stacks_to_channel_last_image(space: gym.spaces.Space, n_stack: int) -> bool:
    """Whether ``n_stack`` observations of ``space`` stacked on their last axis make an image that SB3 reads as
    channel-last, and so transposes (``VecTransposeImage``, added by ``_wrap_env``), and whose transpose SB3 reads as
    channel-first (else ``_wrap_env`` would transpose the fused wrapper's output again)."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return False
    stacked = _stacked(space, n_stack)
    if not is_image_space(stacked) or is_image_space_channels_first(stacked):
        return False
    return is_image_space_channels_first(VecTransposeImage.transpose_space(stacked))


def _fuse_frame_stack(venv: VecEnv, cls: type, kwargs: dict[str, Any], last: bool) -> bool:
    """Whether the wrapper ``cls(venv, **kwargs)``, the last of the stack, is a ``VecFrameStack`` on the last axis that
    SB3's ``_wrap_env`` would then transpose: :class:`ChannelsFirstFrameStack` does both at once."""
    return (
        last
        and cls is VecFrameStack
        and kwargs.get("channels_order") == "last"
        and _stacks_to_channel_last_image(venv.observation_space, kwargs["n_stack"])
    )


_VIEW_CLASSES: dict[type, type] = {}


class TemplateVecEnv(VecEnv):
    """What the main process sees of the workers' envs: a copy of the template ``VecEnv`` (the type the workers step,
    e.g. ``DummyVecEnv`` or ``VecFrameStack``) whose ``num_envs`` is the workers' total.

    ``TemplateVecEnv(template, num_envs)`` is an instance of a subclass of both this class and ``type(template)``, so
    ``isinstance`` checks see the same type as with A2C (``EvalCallback`` compares the training and eval env types, and
    ``sync_envs_normalization`` walks their wrappers side by side). Callbacks read ``num_envs`` (progress bar,
    ``StopTrainingOnMaxEpisodes``), attributes and renders: those come from the template, each env index mapped to it
    (every worker env is a copy of it). The envs themselves are stepped inside the workers: stepping the view, or
    setting an attribute that would never reach the workers, is an error.
    """

    template: VecEnv

    def __new__(cls, template: VecEnv, num_envs: int) -> TemplateVecEnv:
        if cls is TemplateVecEnv:
            base = type(template)
            if base not in _VIEW_CLASSES:
                _VIEW_CLASSES[base] = type(
                    f"TemplateVecEnv[{base.__name__}]", (TemplateVecEnv, base), {"__module__": __name__}
                )
            cls = _VIEW_CLASSES[base]
        return object.__new__(cls)

    def __init__(self, template: VecEnv, num_envs: int):  # the base class' __init__ already ran for the template
        self.__dict__.update(template.__dict__)
        self.template = template
        self.num_envs = num_envs

    def _template_indices(self, indices: Any) -> list[int]:
        return [i % self.template.num_envs for i in self._get_indices(indices)]

    def reset(self) -> Any:
        # The main process never updates normalization statistics: only the workers' own steps do.
        frozen = [venv for venv in vec_normalizes(self.template) if venv.training]
        for venv in frozen:
            venv.training = False
        try:
            obs = self.template.reset()
        finally:
            for venv in frozen:
                venv.training = True
        reps = int(np.ceil(self.num_envs / self.template.num_envs))
        if isinstance(obs, dict):
            return {key: np.concatenate([value] * reps)[: self.num_envs] for key, value in obs.items()}
        return np.concatenate([obs] * reps)[: self.num_envs]

    def step_async(self, actions: np.ndarray) -> None:
        raise RuntimeError("The training envs are stepped inside the workers; use a separate env to step from here.")

    def step_wait(self) -> Any:
        raise RuntimeError("The training envs are stepped inside the workers; use a separate env to step from here.")

    def seed(self, seed: int | None = None) -> Any:
        return self.template.seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        self.template.set_options(options)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        values = self.template.get_attr(attr_name)
        return [values[i] for i in self._template_indices(indices)]

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> list[Any]:
        values = self.template.env_method(method_name, *method_args, **method_kwargs)
        return [values[i] for i in self._template_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Any = None) -> list[bool]:
        values = self.template.env_is_wrapped(wrapper_class)
        return [values[i] for i in self._template_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise RuntimeError(
            f"Cannot set {attr_name!r} on the training envs: they live inside the workers. Set it in the env (or its "
            "factory) before passing it to the model."
        )

    def get_images(self) -> Any:
        return self.template.get_images()

    def render(self, mode: str | None = None) -> Any:
        return self.template.render(mode)

    def close(self) -> None:
        self.template.close()
