"""An env pool as an SB3 ``VecEnv`` (what :meth:`AsyncEnvPool.as_vec_env <sb3_async.env_pool.AsyncEnvPool.as_vec_env>`
returns).

Kept apart from the pool because it imports stable_baselines3 (and so torch), which the env hosts must not.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from sb3_async.env_pool.errors import EnvError, SpacesDifferError
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.shared_buffers import ARRAY_SPACES, FINAL_INFO, FINAL_OBS

__all__ = ["PoolVecEnv"]


class PoolVecEnv(VecEnv):
    """SB3's ``VecEnv`` over an env pool with same-step autoreset: the transitions ``DummyVecEnv`` gives for the same
    env factories and seeds (``terminal_observation`` and ``TimeLimit.truncated`` in the infos, the reset infos in
    ``reset_infos``), stepped by the pool's env hosts.

    Also usable as SB3's ``vec_env_cls``: ``make_vec_env("CartPole-v1", n_envs=8, vec_env_cls=PoolVecEnv)``.

    :param pool: the pool (``autoreset=True``), or env factories to build one from; closing this VecEnv closes it
    :param pool_kwargs: for the pool when ``pool`` is a list of factories (as ``vec_env_kwargs``; see
        :class:`~sb3_async.env_pool.AsyncEnvPool`, whose default layout,
        :func:`~sb3_async.env_pool.layout.synchronous_layout`, suits a VecEnv)
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
        _check_sb3_space(pool.observation_space(0))
        if (differs := pool.differing_observation_space()) is not None:
            raise SpacesDifferError(f"SB3's VecEnvs take envs of one observation space: {differs}")
        self.pool = pool
        super().__init__(pool.n_envs, pool.observation_space(0), pool.action_space(0))
        self._all_ids = list(range(self.num_envs))
        self.metadata = pool.get_attr("metadata", [0])[0]  # env 0's, as DummyVecEnv's
        self._bounds = _action_bounds(self.action_space)

    def _check_actions(self, actions: Any) -> Any:
        """The batch of actions, checked against the action space (one vectorised test for Box and Discrete)."""
        space, n = self.action_space, self.num_envs
        if isinstance(space, (spaces.Box, spaces.Discrete)):
            array = np.asarray(actions)
            # dtype.kind, not np.issubdtype: this runs at every step and issubdtype costs more than a small env's step
            if isinstance(space, spaces.Box):
                if array.shape != (n, *space.shape) or array.dtype.kind not in "biuf":
                    raise ValueError(
                        f"Invalid actions of shape {array.shape}: expected {(n, *space.shape)} numbers for {space}"
                    )
                array = array.astype(space.dtype, copy=False)
                low, high = self._bounds
                if np.ndim(low):
                    inside = bool((array >= low).all() and (array <= high).all())
                else:  # the same bounds in every dimension: two reductions (a NaN fails both tests, as it should)
                    inside = not array.size or bool(low <= array.min() and array.max() <= high)
            else:
                array = array.reshape(n) if array.size == n else array
                low, high = self._bounds
                inside = False
                if array.shape == (n,) and array.dtype.kind in "iu":
                    # min and max of a few Python ints: a third of numpy's two reductions on arrays this small
                    values = array.tolist() if n <= 256 else (int(array.min()), int(array.max()))
                    inside = low <= min(values) and max(values) < high
            if inside:
                return array
        elif len(actions) == n and all(space.contains(action) for action in actions):
            if isinstance(space, (spaces.MultiDiscrete, spaces.MultiBinary)):
                return np.asarray(actions)
            return _batched(space, actions)
        if len(actions) != n:
            raise ValueError(f"Invalid actions: {len(actions)} given, expected one per env ({n})")
        for i in range(n):  # name the first bad one
            self.pool.check_action(i, actions[i])
        raise ValueError(f"Invalid actions {actions!r}: expected {n} actions in {space}")

    def step_async(self, actions: np.ndarray) -> None:
        self.pool.send_all(self._check_actions(actions))

    def step_wait(self) -> VecEnvStepReturn:
        pool = self.pool
        pool.check_open()
        if not pool.n_in_flight:
            raise RuntimeError("step_wait() without step_async(): no step was sent")
        try:
            results = pool.collect_every()
        except EnvError:  # the step failed as a whole: the other envs' results go too, the next step_async may follow
            pool.discard(self._all_ids)
            raise
        buffers = pool.buffers
        obs = buffers.obs.read(slice(None))
        rewards = buffers.rewards.astype(np.float32)
        dones = buffers.terminated | buffers.truncated
        infos: list[dict[str, Any]] = []
        for i, time_limit in enumerate((buffers.truncated & ~buffers.terminated).tolist()):
            info = results.get(i)
            if info is None:  # most steps: the env's info is empty
                infos.append({"TimeLimit.truncated": time_limit})
                continue
            if FINAL_OBS in info:  # the episode ended: the step's info is the final one, the rest is the reset's
                step_info = dict(info[FINAL_INFO])
                step_info["terminal_observation"] = info[FINAL_OBS]
                reset_info = {key: value for key, value in info.items() if key not in (FINAL_OBS, FINAL_INFO, "error")}
                if "error" in info:
                    step_info["error"] = info["error"]
                self.reset_infos[i] = reset_info
            else:
                step_info = info
            step_info["TimeLimit.truncated"] = time_limit
            infos.append(step_info)
        return obs, rewards, dones, infos

    def reset(self) -> VecEnvObs:
        seeds = self._seeds if any(seed is not None for seed in self._seeds) else None
        options = [options or None for options in self._options]
        infos = self.pool.reset_envs(seed=seeds, options=options)
        self.reset_infos = [infos[i] for i in self._all_ids]
        self._reset_seeds()
        self._reset_options()
        return self.pool.buffers.obs.read(slice(None))

    def close(self) -> None:
        self.pool.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but get_images() needs it to be `rgb_array`.", stacklevel=2)
            return [None for _ in self._all_ids]
        return self.pool.render()

    def _ids(self, indices: VecEnvIndices) -> list[int]:
        """SB3's ``indices`` (None, an int, or ints: a list, a range, an array; negative ones counted from the end, as
        list indexes) as env ids; ``IndexError`` out of range, as ``DummyVecEnv``."""
        n = self.num_envs
        ids = []
        for i in self._get_indices(indices):
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"Invalid env index {i!r} in indices={indices!r}: expected an int (or None, or ints)")
            if not -n <= i < n:
                raise IndexError(f"Env index {i} in indices={indices!r} out of range for {n} envs")
            ids.append(int(i) % n)
        return ids

    def _each(self, indices: VecEnvIndices, command: Callable[[list[int]], list[Any]]) -> list[Any]:
        """``command`` on the envs of ``indices``, in their order; an env named twice answers twice, in order, as
        ``DummyVecEnv``'s loop does (the pool takes each id once per command, so repeats go in later rounds)."""
        ids = self._ids(indices)
        if len(set(ids)) == len(ids):
            return command(ids)
        results: list[Any] = [None] * len(ids)
        rounds: list[list[int]] = []  # positions in ids; round k holds the k-th mention of each env
        seen: dict[int, int] = {}
        for position, i in enumerate(ids):
            k = seen[i] = seen.get(i, -1) + 1
            if k == len(rounds):
                rounds.append([])
            rounds[k].append(position)
        for positions in rounds:
            for position, value in zip(positions, command([ids[p] for p in positions])):
                results[position] = value
        return results

    def has_attr(self, attr_name: str) -> bool:
        return self.pool.has_attr(attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._each(indices, lambda ids: self.pool.get_attr(attr_name, ids))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Set ``attr_name`` on each env's outermost wrapper, as ``DummyVecEnv`` and ``SubprocVecEnv`` do (``setattr``
        on the env they hold: an attribute of an inner env is shadowed, not changed)."""
        self._each(indices, lambda ids: self.pool.call("__setattr__", attr_name, value, ids=ids))

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._each(indices, lambda ids: self.pool.call(method_name, *method_args, ids=ids, **method_kwargs))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return self._each(indices, lambda ids: self.pool.env_is_wrapped(wrapper_class, ids))


def _action_bounds(space: spaces.Space) -> tuple[Any, Any]:
    """What :meth:`PoolVecEnv._check_actions` compares a batch with: a Box's bounds (two scalars when every dimension
    has the same), a Discrete's ``start`` and ``start + n`` (excluded)."""
    if isinstance(space, spaces.Box):
        low, high = space.low, space.high
        if low.size and (low == low.flat[0]).all() and (high == high.flat[0]).all():
            return low.flat[0], high.flat[0]
        return low, high
    if isinstance(space, spaces.Discrete):
        return space.start, space.start + space.n
    return None, None


def _batched(space: spaces.Space, actions: Sequence[Any]) -> Any:
    """A list of Dict or Tuple actions as the pool's buffers batch them (one array per key or index)."""
    if isinstance(space, spaces.Dict):
        return {key: np.asarray([action[key] for action in actions]) for key in space.spaces}
    if isinstance(space, spaces.Tuple):
        return {k: np.asarray([action[k] for action in actions]) for k in range(len(space.spaces))}
    raise TypeError(
        f"AsyncEnvPool's VecEnv supports Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple actions: {space}"
    )


def _check_sb3_space(space: spaces.Space) -> None:
    """``TypeError`` unless SB3's VecEnvs take observations of ``space``: an array space (Box, Discrete, MultiDiscrete,
    MultiBinary), alone or in one Dict or Tuple."""
    parts = (
        list(space.spaces.values())
        if isinstance(space, spaces.Dict)
        else list(space)
        if isinstance(space, spaces.Tuple)
        else [space]
    )
    for part in parts:
        if not isinstance(part, ARRAY_SPACES):
            raise TypeError(
                f"SB3's VecEnvs take Box, Discrete, MultiDiscrete and MultiBinary observations, alone or in one Dict or "
                f"Tuple; this pool's envs observe {space}. Use the pool itself, or its gymnasium view "
                f"(pool.as_gym_vector_env()), which take every space"
            )
