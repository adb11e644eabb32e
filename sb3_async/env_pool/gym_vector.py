"""An env pool as a gymnasium ``VectorEnv`` (what :meth:`AsyncEnvPool.as_gym_vector_env
<sb3_async.env_pool.AsyncEnvPool.as_gym_vector_env>` returns), for code written against gymnasium's vector API (CleanRL
style loops, gymnasium's vector wrappers).

It imports neither torch nor stable_baselines3.
"""

from __future__ import annotations

import builtins
import functools
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from sb3_async.env_pool.errors import EnvError, SpacesDifferError
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.shared_buffers import ARRAY_SPACES, FINAL_INFO, FINAL_OBS

__all__ = ["InvalidActionsError", "InvalidOptionsError", "PoolVectorEnv"]

_MODES = ", ".join(repr(mode.value) for mode in AutoresetMode)
_Method = TypeVar("_Method", bound=Callable[..., Any])


class InvalidActionsError(ValueError, TypeError):
    """Actions that are not a batch of the action space: a ``ValueError`` (as the pool's other views raise) and a
    ``TypeError`` (as gymnasium's vector envs raise for a batch of the wrong size or type)."""


class InvalidOptionsError(ValueError, TypeError):
    """An invalid ``reset_mask``: a ``ValueError``, and a ``TypeError`` as gymnasium's vector envs raise."""


def _check_reset_mask(mask: Any, n_envs: int) -> None:
    """Refuse a ``reset_mask`` that is not a bool array of one value per env with a True, in gymnasium's words."""
    if not isinstance(mask, np.ndarray):
        problem = f"must be a numpy array, got {type(mask)}"
    elif mask.shape != (n_envs,):
        problem = f"must have shape `({n_envs},)`, got {mask.shape}"
    elif mask.dtype != np.bool_:
        problem = f"must have `dtype=np.bool_`, got {mask.dtype}"
    elif not mask.any():
        problem = f"must contain a boolean array with at least one True value, got reset_mask={mask}"
    else:
        return
    raise InvalidOptionsError(f"`options['reset_mask']` {problem}")


#: The exception types built by :func:`_as_env_type`: EnvError and the type an env raised
_ENV_TYPES: dict[type[Exception], type[EnvError] | None] = {}


def _raised_type(worker_traceback: str) -> type[Exception] | None:
    """The type of the exception a traceback ends with, when it is a builtin one or one of a module imported here: the
    name the env host gave it (:class:`~sb3_async.env_pool.host.EnvTraceback`), else the one its last line shows."""
    name = getattr(worker_traceback, "raised", "")
    if not name:
        last = worker_traceback.rstrip().rpartition("\n")[2]
        name = last.partition(":")[0].strip()
    if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
        return None
    module, _, qualname = name.rpartition(".")
    owner = sys.modules.get(module) if module else builtins
    found = getattr(owner, qualname, None)
    return found if isinstance(found, type) and issubclass(found, Exception) else None


def _as_env_type(error: EnvError) -> EnvError:
    """``error``, also of the type of the exception the env raised (an ``EnvError`` that is a ``ValueError`` when the
    env raised a ``ValueError``), as gymnasium's vector envs raise the env's own exception; ``error`` itself when that
    type is unknown here or does not combine with ``EnvError``."""
    raised = _raised_type(error.worker_traceback)
    if raised is None or isinstance(error, raised):
        return error
    if raised not in _ENV_TYPES:
        try:
            namespace = {"__module__": __name__, "__doc__": EnvError.__doc__, "__str__": BaseException.__str__}
            _ENV_TYPES[raised] = type(f"Env{raised.__name__}", (EnvError, raised), namespace)
        except TypeError:  # layouts that do not combine
            _ENV_TYPES[raised] = None
    combined = _ENV_TYPES[raised]
    if combined is None:
        return error
    try:
        return combined(error.env_id, error.call, error.worker_traceback)
    except Exception:  # an exception type whose constructor wants other arguments
        return error


def _raising_env_types(method: _Method) -> _Method:
    """Make ``method`` raise each :class:`EnvError` as :func:`_as_env_type` makes it."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except EnvError as error:
            converted = _as_env_type(error)
            if converted is error:
                raise
            raise converted.with_traceback(error.__traceback__) from None

    return wrapper  # type: ignore[return-value]


def _observation_spaces(pool: AsyncEnvPool, mode: Any) -> tuple[spaces.Space, spaces.Space]:
    """The single and batch observation spaces of the view of ``pool`` in observation mode ``mode``."""
    if isinstance(mode, tuple) and len(mode) == 2:
        if not all(isinstance(space, spaces.Space) for space in mode):
            raise TypeError(
                f"Expected both elements of observation_mode to be Spaces, got {type(mode[0])} and {type(mode[1])}"
            )
        return mode[1], mode[0]  # gymnasium's order: (batch, single)
    if mode == "same":
        single = pool.observation_space(0)
        if pool.differing_observation_space() is not None:
            i, space = next((i, space) for i in range(1, pool.n_envs) if (space := pool.observation_space(i)) != single)
            raise SpacesDifferError(  # gymnasium's words, which its tests match
                f"PoolVectorEnv(..., observation_mode='same') however the sub-environments observation spaces are not "
                f"equivalent. single_observation_space={single}, sub-environment observation_space={space} (env {i}). "
                "If this is intentional, use `observation_mode='different'` instead."
            )
        return single, batch_space(single, pool.n_envs)
    if mode == "different":
        return pool.observation_space(0), batch_differing_spaces([pool.observation_space(i) for i in range(pool.n_envs)])
    raise ValueError(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch observation space, "
        f"actual got {mode}"
    )


class PoolVectorEnv(VectorEnv):
    """Gymnasium's ``VectorEnv`` over an env pool: the batches, infos (a dict of arrays with ``_key`` masks) and
    autoreset of gymnasium's ``SyncVectorEnv`` for the same env factories and seeds, stepped by the pool's env hosts.

    :param pool: the pool; closing this vector env closes it
    :param autoreset_mode: gymnasium's ``AutoresetMode`` (or its value, ``"NextStep"``...): ``NEXT_STEP`` (default, as
        gymnasium's): the step where an env ends returns its last observation, the next step does not step it and
        returns its reset observation, reward 0, not terminated nor truncated; ``SAME_STEP``: the step where an env
        ends returns the reset observation, the last observation and info in ``infos["final_obs"]`` and
        ``infos["final_info"]``. Both need a pool with ``autoreset=True``. ``DISABLED``: an env that ended must be
        reset with ``reset(options={"reset_mask": mask})`` before its next step; it needs ``autoreset=False``
    :param observation_mode: as gymnasium's vector envs: ``"same"`` (default), every env has env 0's observation
        space (``SpacesDifferError``, a ``RuntimeError``, otherwise); ``"different"``, the envs' spaces may differ in
        values (bounds, counts) but not in the shapes and dtypes of their values, the batch space is
        ``batch_differing_spaces`` of them; or a tuple ``(batch observation space, single observation space)``
    """

    def __init__(
        self,
        pool: AsyncEnvPool,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        observation_mode: str | tuple[spaces.Space, spaces.Space] = "same",
    ):
        if not isinstance(pool, AsyncEnvPool):
            raise TypeError(f"pool must be an AsyncEnvPool, got {type(pool).__name__}")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            message = f"Invalid autoreset_mode={autoreset_mode!r}: expected an AutoresetMode or one of {_MODES}"
            raise ValueError(message) from None
        if pool.autoreset != (mode != AutoresetMode.DISABLED):
            raise ValueError(
                f"autoreset_mode={mode} needs an AsyncEnvPool with autoreset={not pool.autoreset}, this one has "
                f"autoreset={pool.autoreset} (NEXT_STEP and SAME_STEP use the pool's autoreset, DISABLED does not)"
            )
        self.pool, self.autoreset_mode = pool, mode
        self.num_envs = pool.n_envs
        self.single_observation_space, self.observation_space = _observation_spaces(pool, observation_mode)
        self.single_action_space = pool.action_space(0)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**pool.get_attr("metadata", [0])[0], "autoreset_mode": mode}
        self.render_mode = pool.render_mode
        self._all_ids = list(range(self.num_envs))
        # NEXT_STEP: the envs whose episode ended at the last step (the pool reset them then), with their reset info
        self._autoreset: dict[int, dict[str, Any]] = {}

    # ---------------------------------------------------------------- reset and step
    @_raising_env_types
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every env, or those of ``options["reset_mask"]`` (a bool array, one per env), as ``SyncVectorEnv``.

        :param seed: env ``i`` gets ``seed + i``; or a list of one seed (or None) per env
        :param options: for every env's ``reset`` (without ``reset_mask``)
        """
        self.pool.check_open()
        ids = self._all_ids
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            _check_reset_mask(mask, self.num_envs)
            ids = np.flatnonzero(mask).tolist()
        if seed is None or isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [None if seed is None else int(seed) + i for i in ids]
        elif isinstance(seed, Sequence) and not isinstance(seed, str) and len(seed) == self.num_envs:
            seeds = [seed[i] for i in ids]
        else:
            raise ValueError(f"Invalid seed={seed!r}: expected an int, None, or a list of one seed per env ({self.num_envs})")
        reset_infos = self.pool.reset_envs(seed=seeds, options=options, ids=ids)
        for i in ids:
            self._autoreset.pop(i, None)
        infos: dict[str, Any] = {}
        for i in ids:
            infos = self._add_info(infos, reset_infos[i], i)
        return self.pool.buffers.obs.read(slice(None)), infos

    @_raising_env_types
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env (NEXT_STEP: every env but those that ended at the last step, which return their reset
        observation) with ``actions``, a batch of the :attr:`action_space`."""
        pool = self.pool
        pool.check_open()
        if pool.n_in_flight:
            raise RuntimeError("This AsyncEnvPool has steps in flight (sent with send()): recv() them first")
        checked = self._check_actions(actions)
        autoreset = self._autoreset
        ids = [i for i in self._all_ids if i not in autoreset] if autoreset else self._all_ids
        results: dict[int, dict[str, Any]] = {}
        if self.autoreset_mode == AutoresetMode.DISABLED and len(pool.agents) < self.num_envs:
            ended = sorted(set(ids) - set(pool.agents))
            raise ValueError(
                f"Envs {ended} have ended and autoreset_mode=DISABLED: reset them first, "
                "reset(options={'reset_mask': mask}) with mask True for them"
            )
        if len(ids) == self.num_envs:
            pool.send_all(checked)
        elif ids:
            pool.buffers.actions.write(slice(None), checked)  # the envs not stepped ignore theirs
            pool.start_step(ids)
        if ids:
            try:
                results = dict(pool.collect(ids, None, len(ids), only=True))
            except EnvError:  # the other envs' results of this step go too, as SyncVectorEnv's step raises as a whole
                pool.discard(ids)
                raise
        buffers = pool.buffers
        obs = buffers.obs.read(slice(None))
        rewards, terminations, truncations = buffers.rewards.copy(), buffers.terminated.copy(), buffers.truncated.copy()
        env_infos: list[dict[str, Any]] = []
        reset_now: dict[int, dict[str, Any]] = {}
        for i in self._all_ids:
            if i in autoreset:  # NEXT_STEP: the reset the pool did at the last step
                rewards[i], terminations[i], truncations[i] = 0.0, False, False
                env_infos.append(autoreset[i])
                continue
            info = results[i]
            if FINAL_OBS not in info:
                env_infos.append(info)
                continue
            reset_info = {key: value for key, value in info.items() if key not in (FINAL_OBS, FINAL_INFO)}
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                env_infos.append({FINAL_OBS: info[FINAL_OBS], FINAL_INFO: info[FINAL_INFO], **reset_info})
            else:  # NEXT_STEP: this step returns the last observation, the next one the reset's
                obs = buffers.obs.with_row(obs, i, info[FINAL_OBS])
                final_info = dict(info[FINAL_INFO])
                if "error" in reset_info:  # on_error="restart": the error belongs to the step that ended the episode
                    final_info["error"] = reset_info.pop("error")
                env_infos.append(final_info)
                reset_now[i] = reset_info
        self._autoreset = reset_now
        infos: dict[str, Any] = {}
        for i, info in enumerate(env_infos):
            if self.autoreset_mode == AutoresetMode.SAME_STEP and FINAL_OBS in info:
                infos = self._add_info(infos, {FINAL_OBS: info.pop(FINAL_OBS), FINAL_INFO: info.pop(FINAL_INFO)}, i)
            infos = self._add_info(infos, info, i)
        return obs, rewards, terminations, truncations, infos

    def _check_actions(self, actions: Any) -> Any:
        """The batch of actions as the pool's buffers take it, checked against :attr:`action_space` (``ValueError``
        naming the first env whose action is not in the single action space)."""
        space = self.single_action_space
        try:
            checked = _batch(space, actions, self.num_envs)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise InvalidActionsError(
                f"Invalid actions {actions!r} for the batch action space {self.action_space}: {error}"
            ) from None
        try:
            if self.action_space.contains(checked):
                return checked
        except Exception:  # a custom space whose contains() cannot judge them: the envs will (gymnasium never checks)
            return checked
        for i in self._all_ids:  # name the first bad one; an env that only resets at this step ignores its action
            if i not in self._autoreset:
                self.pool.check_action(i, self.pool.buffers.actions.row(checked, i))
        if self._autoreset:
            return checked
        raise InvalidActionsError(f"Invalid actions {actions!r}: not in {self.action_space}")

    # ---------------------------------------------------------------- the envs
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed`` (``(seed, seed + 1, ...)`` after ``reset(seed=seed)``), as ``SyncVectorEnv``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's random generator, as ``SyncVectorEnv``."""
        return self.get_attr("np_random")

    @_raising_env_types
    def render(self) -> tuple[Any, ...]:
        """Each env's ``render()``."""
        return tuple(self.pool.render())

    @_raising_env_types
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of each env with ``args`` and ``kwargs``; for an attribute that is not callable, its value
        (as ``SyncVectorEnv``)."""
        try:
            return tuple(self.pool.call(name, *args, **kwargs))
        except EnvError as error:
            if not error.worker_traceback.rstrip().endswith("object is not callable"):
                raise
        return self.get_attr(name)

    @_raising_env_types
    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of each env, looked up through its wrappers."""
        return tuple(self.pool.get_attr(name))

    @_raising_env_types
    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set attribute ``name`` of each env (on the wrapper that has it, as ``SyncVectorEnv``): ``values`` one per
        env (a list or tuple), or one value for all."""
        if not isinstance(values, (list, tuple)):
            self.pool.set_attr(name, values)
            return
        if len(values) != self.num_envs:
            raise ValueError(f"Invalid values: {len(values)} given for {self.num_envs} envs (one per env, or one value)")
        for i, value in enumerate(values):
            self.pool.set_attr(name, value, [i])

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pool!r}, autoreset_mode={self.autoreset_mode})"


def _batch(space: spaces.Space, value: Any, n: int) -> Any:
    """A batch of ``n`` values of a space as the pool's buffers take it: an array of the space's dtype per array leaf
    (an integer space refuses floats), a tuple of ``n`` values per other leaf, in dicts and tuples at any depth."""
    if isinstance(space, spaces.Dict):
        return {key: _batch(sub, value[key], n) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if len(value) != len(space.spaces):
            raise ValueError(f"{len(value)} parts, expected {len(space.spaces)}")
        return tuple(_batch(sub, value[k], n) for k, sub in enumerate(space.spaces))
    if not isinstance(space, ARRAY_SPACES):
        values = tuple(value)  # Text, Graph, Sequence, OneOf, a custom space: one value per env, as batch_space has it
        if len(values) != n:
            raise ValueError(f"{len(values)} values for {n} envs of {space}")
        return values
    array = np.asarray(value)
    expected = (n, *(space.shape or ()))
    if array.shape != expected:
        raise ValueError(f"expected shape {expected} (one value of {space} for each of {n} envs), given shape {array.shape}")
    box = isinstance(space, spaces.Box)
    if array.dtype.kind not in ("biuf" if box else "biu"):
        raise ValueError(f"expected {'numbers' if box else 'integers'} for {space}, given a {array.dtype} array")
    return array.astype(space.dtype, copy=False)
