"""An :class:`~sb3_async.common.env_pool.AsyncEnvPool` as an SB3 ``VecEnv`` (what :meth:`AsyncEnvPool.as_vec_env` returns).

Kept apart from the pool because it imports stable_baselines3 (and so torch), which the env workers must not.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from sb3_async.common.env_pool import AsyncEnvPool, EnvError
from sb3_async.common.env_worker import FINAL_INFO, FINAL_OBS


class PoolVecEnv(VecEnv):
    """SB3's ``VecEnv`` over an :class:`AsyncEnvPool` with same-step autoreset: the transitions ``SubprocVecEnv`` gives
    for the same env factories and seeds (``terminal_observation`` and ``TimeLimit.truncated`` in the infos, the reset
    infos in ``reset_infos``), stepped by the pool's workers.

    Also usable as SB3's ``vec_env_cls``: ``make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=PoolVecEnv)``.

    :param pool: the pool (``autoreset=True``), or env factories to build one from; closing this VecEnv closes it
    :param pool_kwargs: for :class:`AsyncEnvPool` when ``pool`` is a list of factories (as ``vec_env_kwargs``)
    """

    def __init__(self, pool: AsyncEnvPool | list[Callable[[], gym.Env]], **pool_kwargs: Any):
        if isinstance(pool, list):
            pool = AsyncEnvPool(pool, **pool_kwargs)
        elif pool_kwargs:
            raise ValueError(f"pool_kwargs {sorted(pool_kwargs)} apply to a list of env factories, not to a built pool")
        if not isinstance(pool, AsyncEnvPool):
            raise TypeError(f"pool must be an AsyncEnvPool or a list of env factories, got {type(pool).__name__}")
        if not pool.autoreset:
            raise ValueError("as_vec_env() needs an AsyncEnvPool with autoreset=True (SB3's VecEnv semantics)")
        self.pool = pool
        super().__init__(pool.n_envs, pool.observation_space(0), pool.action_space(0))
        self._all_ids = list(range(self.num_envs))
        # Every env in this process (n_workers=0, or engine="envpool"): step them directly, without the bookkeeping
        # of steps in flight that sending to worker processes needs. What they return is the same.
        self._direct = pool.n_workers == 0 and pool.local_envs == pool.n_envs
        self._direct_work: list[tuple[int, Any, str | None]] | None = None

    def _check_actions(self, actions: np.ndarray) -> list[tuple[int, Any]]:
        """The actions as ``(id, action)``, checked against the action space in one vectorised test."""
        space, n = self.action_space, self.num_envs
        array = np.asarray(actions)
        # dtype.kind, not np.issubdtype: this runs at every step and issubdtype costs more than a small env's step
        if isinstance(space, spaces.Box):
            if array.shape != (n, *space.shape) or array.dtype.kind not in "biuf":
                raise ValueError(f"Invalid actions of shape {array.shape}: expected {(n, *space.shape)} numbers for {space}")
            array = array.astype(space.dtype, copy=False)
            inside = bool(np.all(array >= space.low) and np.all(array <= space.high))
        elif isinstance(space, spaces.Discrete):
            array = array.reshape(n) if array.size == n else array
            inside = (
                array.shape == (n,)
                and array.dtype.kind in "iu"
                and bool(np.all((array >= space.start) & (array < space.start + space.n)))
            )
        else:
            inside = len(array) == n and all(space.contains(action) for action in array)
        if not inside:
            for i in range(n):  # name the first bad one
                self.pool._check_action(i, array[i])
            raise ValueError(f"Invalid actions {actions!r}: expected {n} actions in {space}")
        return list(zip(self._all_ids, array))

    def step_async(self, actions: np.ndarray) -> None:
        items = self._check_actions(actions)
        if self._direct:
            self.pool._check_open()
            self._direct_work = [(i, action, None) for i, action in items]
        else:
            self.pool._send(items)

    def step_wait(self) -> VecEnvStepReturn:
        if self._direct:
            if self._direct_work is None:
                raise RuntimeError("step_wait() without step_async(): no step was sent")
            work, self._direct_work = self._direct_work, None
            assert self.pool._local is not None
            results, errors = self.pool._local.step(work)
            if errors:
                first = min(errors)
                raise EnvError(first, "step()", errors[first])
            results.sort(key=lambda result: result[0])  # EnvPool returns its own order
        else:
            # Sent together, so received ordered by id (the pool returns results oldest send first, then by id)
            results = self.pool._collect(set(self._all_ids), None, self.num_envs, only=True)
        obs = self.pool._obs.read(slice(None))
        rewards = np.array([result[1] for result in results], dtype=np.float32)
        dones = np.array([result[2] or result[3] for result in results], dtype=bool)
        infos: list[dict[str, Any]] = []
        for i, _, terminated, truncated, info in results:
            if FINAL_OBS in info:  # the episode ended: the step's info is the final one, the rest is the reset's
                step_info = dict(info[FINAL_INFO])
                step_info["terminal_observation"] = info[FINAL_OBS]
                reset_info = {key: value for key, value in info.items() if key not in (FINAL_OBS, FINAL_INFO, "error")}
                if "error" in info:
                    step_info["error"] = info["error"]
                self.reset_infos[i] = reset_info
            else:
                step_info = dict(info)
            step_info["TimeLimit.truncated"] = truncated and not terminated
            infos.append(step_info)
        return obs, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        seeds = self._seeds if any(seed is not None for seed in self._seeds) else None
        options = [options or None for options in self._options]
        _, infos = self.pool.reset(seed=seeds, options=options)
        self.reset_infos = [infos[i] for i in self._all_ids]
        self._reset_seeds()
        self._reset_options()
        return self.pool._obs.read(slice(None))

    def close(self) -> None:
        self.pool.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but get_images() needs it to be `rgb_array`.", stacklevel=2)
            return [None for _ in self._all_ids]
        return self.pool.render()

    def has_attr(self, attr_name: str) -> bool:
        return self.pool.has_attr(attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.pool.get_attr(attr_name, self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.pool.set_attr(attr_name, value, self._get_indices(indices))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self.pool.call(method_name, *method_args, ids=self._get_indices(indices), **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self.pool.env_is_wrapped(wrapper_class, self._get_indices(indices))
