"""Random-walk action noise of AE-DDPG (Zhang et al., §IV-C, eq. 6-10): power-law noise with a (1/f)^2 spectrum.

Eq. 10, ``y_t = y_{t-1} + x_t`` with ``x_t ~ N(0, sigma^2 I)``, is a random walk: its spread grows as ``sqrt(t)``
(``sigma * sqrt(t)``), so left alone it pins the action to its bounds within tens of steps. The walk is therefore
reset to 0 at every episode end and kept inside ``[-bound, bound]``; see :class:`RandomWalkActionNoise`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise

BoundMode = Literal["reflect", "clip", "leak"]
BOUND_MODES: tuple[str, ...] = ("reflect", "clip", "leak")


def random_walk_step(y: np.ndarray, x: np.ndarray, bound: float, mode: BoundMode = "reflect", leak: float = 0.0) -> np.ndarray:
    """One step of the bounded random walk: eq. 10 (``y_t = y_{t-1} + x_t``), then the bound.

    :param y: the walk's previous value ``y_{t-1}``
    :param x: the white-noise shot ``x_t``
    :param bound: half-width of the interval the walk is kept in
    :param mode: ``"reflect"`` folds a step that leaves ``[-bound, bound]`` back inside (the walk keeps eq. 10's
        increments everywhere inside the interval), ``"clip"`` stops it at the bound, ``"leak"`` uses
        ``y_t = (1 - leak) y_{t-1} + x_t`` (an AR(1) / Ornstein-Uhlenbeck walk) and then clips
    :param leak: the pull towards 0 per step of ``mode="leak"``
    :return: ``y_t``
    """
    if mode == "leak":
        return np.clip((1.0 - leak) * y + x, -bound, bound)
    z = y + x
    if mode == "clip":
        return np.clip(z, -bound, bound)
    # Reflection at +-bound is the triangle wave of period 4 * bound: exact for steps of any size.
    period = 4.0 * bound
    folded = np.mod(z + bound, period)
    return np.where(folded <= 2.0 * bound, folded, period - folded) - bound


class RandomWalkActionNoise(ActionNoise):
    """
    Random-walk action noise of AE-DDPG (`Zhang et al. <https://arxiv.org/abs/1903.00827>`_, §IV-C, eq. 10):
    ``y_t = y_{t-1} + x_t``, ``x_t ~ N(0, sigma^2 I)``, with ``y`` reset to 0 at episode ends and kept within bounds.

    Built as SB3's noises are (``RandomWalkActionNoise(mean, sigma)``), it is one stream, shape ``(action_dim,)``: SB3's
    algorithms vectorise it per env (``VectorizedActionNoise`` copies it once per env, each copy drawing its own shots,
    also with an explicit ``generator``) and AE-DDPG gives it one stream per env. With ``n_envs``, it holds one
    independent stream per env, drawn together from one generator, and is a ``VectorizedActionNoise`` that SB3 uses as
    given (it must then have as many streams as the algorithm has envs); SB3 calls ``reset(indices)`` for the envs
    whose episode ended.

    :param mean: mean added to the walk, shape ``(action_dim,)`` (SB3 convention: zeros)
    :param sigma: standard deviation of the shots ``x_t`` (scalar or ``(action_dim,)``), in SB3's scaled action space
        ``[-1, 1]``. Default 0.05 chosen by measurement (docs/guide/replay.md): the walk crosses half the action range in
        about 100 steps, within one Pendulum episode, without sitting on the bounds; the paper gives no value.
    :param n_envs: None (default): one stream, vectorised by the algorithm for any number of envs; an int: that many
        streams, one per env, in one ``VectorizedActionNoise``
    :param bound: half-width of the interval the walk stays in; default 1.0, SB3's scaled action bound (the paper:
        the noise is kept inside the action bounds)
    :param bound_mode: ``"reflect"`` (default, chosen by measurement: no mass piles up on the bounds and the increments
        stay those of eq. 10), ``"clip"`` or ``"leak"`` (see :func:`random_walk_step`)
    :param leak: pull towards 0 per step for ``bound_mode="leak"``; 0.01 by default
    :param generator: NumPy generator for the shots; ``None`` uses NumPy's global state like SB3's noises (seeded by
        SB3's ``set_random_seed``)
    :param dtype: dtype of the returned noise
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> RandomWalkActionNoise:
        # The type SB3 checks depends on n_envs: a VectorizedActionNoise is used as given, any other noise vectorised.
        n_envs = kwargs.get("n_envs", args[2] if len(args) > 2 else None)
        if cls is RandomWalkActionNoise and n_envs is not None:
            cls = VectorizedRandomWalkActionNoise
        return super().__new__(cls)

    def __init__(
        self,
        mean: np.ndarray,
        sigma: float | np.ndarray = 0.05,
        n_envs: int | None = None,
        bound: float = 1.0,
        bound_mode: BoundMode = "reflect",
        leak: float = 0.01,
        generator: np.random.Generator | None = None,
        dtype: DTypeLike = np.float32,
    ) -> None:
        mean = np.asarray(mean, dtype=np.float64)
        if mean.ndim != 1:
            raise ValueError(f"Invalid mean with shape {mean.shape}: expected a 1-D array of shape (action_dim,)")
        sigma_arr = np.broadcast_to(np.asarray(sigma, dtype=np.float64), mean.shape).copy()
        if not np.all(np.isfinite(sigma_arr)) or np.any(sigma_arr < 0):
            raise ValueError(f"Invalid sigma={sigma!r}: expected finite non-negative values")
        if n_envs is not None and (isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1):
            raise ValueError(f"Invalid n_envs={n_envs!r}: expected a positive integer or None")
        if not bound > 0 or not np.isfinite(bound):
            raise ValueError(f"Invalid bound={bound!r}: expected a positive finite number")
        if bound_mode not in BOUND_MODES:
            raise ValueError(f"Invalid bound_mode={bound_mode!r}: expected one of {BOUND_MODES}")
        if not 0.0 <= leak <= 1.0:
            raise ValueError(f"Invalid leak={leak!r}: expected a value in [0, 1]")
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError(f"Invalid generator={generator!r}: expected a numpy.random.Generator or None")
        # VectorizedActionNoise.__init__ deep-copies a base noise per env: the streams are ours, so it is not called.
        ActionNoise.__init__(self)
        self.n_envs = 1 if n_envs is None else int(n_envs)
        self._mu = mean
        self._sigma = sigma_arr
        self.bound = float(bound)
        self.bound_mode: BoundMode = bound_mode
        self.leak = float(leak)
        self.generator = generator
        self._dtype = dtype
        self.walk = np.zeros((self.n_envs, mean.shape[0]), dtype=np.float64)

    def for_envs(self, n_envs: int) -> RandomWalkActionNoise:
        """A noise with the same settings and ``n_envs`` streams, starting from 0 (drawn from the same generator)."""
        return RandomWalkActionNoise(
            self._mu, self._sigma, n_envs, self.bound, self.bound_mode, self.leak, self.generator, self._dtype
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> RandomWalkActionNoise:
        # SB3's VectorizedActionNoise deep-copies one noise per env: a copy of an explicit generator would give every env
        # the same shots, so each copy draws from its own child generator instead.
        copied = copy.copy(self)
        copied.walk = self.walk.copy()
        if self.generator is not None:
            copied.generator = self.generator.spawn(1)[0]
        memo[id(self)] = copied
        return copied

    def __call__(self) -> np.ndarray:
        noise = self.sample(range(self.n_envs))
        # One stream: the shape of SB3's single noises, (action_dim,)
        return noise if isinstance(self, VectorizedActionNoise) and self.n_envs > 1 else noise[0]

    def sample(self, indices: Sequence[int]) -> np.ndarray:
        """
        Advance the walks of the envs in ``indices`` only (envs stepped asynchronously: each walk moves once per step of
        its own env) and return their noise, shape ``(len(indices), action_dim)``.

        :param indices: env indices, each at most once
        """
        rows = np.asarray(indices, dtype=np.int64)
        source = np.random if self.generator is None else self.generator
        x = source.normal(0.0, 1.0, size=(len(rows), self.walk.shape[1]))
        self.walk[rows] = random_walk_step(self.walk[rows], x * self._sigma, self.bound, self.bound_mode, self.leak)
        return (self.walk[rows] + self._mu).astype(self._dtype)

    def reset(self, indices: Iterable[int] | None = None) -> None:
        """
        Reset the walk to 0 (eq. 10 starts from y_0 = 0) for all envs, or for those in ``indices``.

        :param indices: env indices to reset; ``None`` resets all
        """
        if indices is None:
            self.walk[:] = 0.0
        else:
            self.walk[np.fromiter(indices, dtype=np.int64)] = 0.0

    def __repr__(self) -> str:
        return (
            f"RandomWalkActionNoise(mu={self._mu}, sigma={self._sigma}, n_envs={self.n_envs}, bound={self.bound}, "
            f"bound_mode={self.bound_mode!r})"
        )


class VectorizedRandomWalkActionNoise(RandomWalkActionNoise, VectorizedActionNoise):
    """What ``RandomWalkActionNoise(..., n_envs=k)`` builds: one stream per env in one ``VectorizedActionNoise``, which
    SB3 uses as given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # SB3's VectorizedActionNoise attributes: this one noise holds every env's stream.
        self._base_noise = self
        self._noises = [self]
