"""The model's side of the ``VecNormalize`` statistics its workers share (:mod:`sb3_async.common.normalization`).

During ``learn()`` every ``VecNormalize`` of the main process (the training env's, the one
``model.get_vec_normalize_env()`` returns) reads live views of the workers' shared statistics; after it they hold
plain snapshots again. ``save()`` keeps a snapshot in the model file, so that a model loaded without an env rebuilds
its env with the statistics it was trained with.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecNormalize

from sb3_async.common.normalization import (
    attach_statistics,
    load_statistics_state,
    share_statistics,
    statistics_state,
    vec_normalizes,
)
from sb3_async.common.worker_envs import EnvRecipe


class SharedNormalization(BaseAlgorithm):
    """``VecNormalize`` statistics shared with the workers, frozen outside ``learn()`` and saved with the model; a
    mixin of :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm` placed before the SB3 class."""

    #: How the workers rebuild the training env (None: a model without env).
    _env_recipe: EnvRecipe | None
    #: ``VecNormalize`` statistics saved with the model (:func:`~sb3_async.common.normalization.statistics_state`).
    _normalization_state: dict[str, Any] | None

    @abstractmethod
    def _ensure_env(self) -> None:
        """Build the training env from the saved env recipe if the model has none (a model loaded without env)."""

    def get_vec_normalize_env(self) -> VecNormalize | None:
        """The ``VecNormalize`` of the training env (live shared statistics during ``learn()``); for a model loaded
        without an env, one rebuilt from the saved env and statistics."""
        if (
            self._vec_normalize_env is None
            and self.env is None
            and self._env_recipe is not None
            and self._env_recipe.normalizes
        ):
            self._ensure_env()
        return self._vec_normalize_env

    def _main_vec_normalizes(self) -> list[VecNormalize]:
        found = [*vec_normalizes(self.env), *([self._vec_normalize_env] if self._vec_normalize_env is not None else [])]
        return list({id(venv): venv for venv in found}.values())

    def _share_normalization(self, n_writers: int) -> dict[str, Any] | None:
        """Shared statistics with one slot per worker (rank ``i`` writes slot ``i + 1``), or None without VecNormalize."""
        venv = self._vec_normalize_env
        if venv is None or self._env_recipe is None or not self._env_recipe.normalizes:
            return None
        shared = share_statistics(venv, n_writers)
        for main_venv in self._main_vec_normalizes():
            attach_statistics(main_venv, shared, slot=None)
        return shared

    def _detach_normalization(self) -> None:
        if self._vec_normalize_env is None:
            return
        state = statistics_state(self._vec_normalize_env)
        for venv in self._main_vec_normalizes():
            load_statistics_state(venv, state)

    def load_saved_normalization(self) -> bool:
        """Copy the ``VecNormalize`` statistics saved with the model into the training env's ``VecNormalize``.

        ``load(path)`` without an env does this itself; ``load(path, env=...)`` keeps the statistics of the env given
        (SB3's convention). Call this after it to resume from the model's own statistics instead (those of the moment
        it was saved, e.g. a checkpoint's). Returns whether there were statistics to copy and an env to copy them to.
        """
        if self._vec_normalize_env is None or self._normalization_state is None:
            return False
        load_statistics_state(self._vec_normalize_env, self._normalization_state)
        return True

    def save(self, path: Any, exclude: Any = None, include: Any = None) -> None:
        if self._vec_normalize_env is not None:
            self._normalization_state = statistics_state(self._vec_normalize_env)
        super().save(path, exclude, include)
