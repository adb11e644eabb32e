"""Our algorithms as entries of the zoo's tables: :class:`ZooAlgorithm` adapts one algorithm to what the zoo's
``ExperimentManager`` builds, :data:`ZOO_ALGORITHMS` lists them and :func:`register` adds them to the zoo's algorithm
table (``rl_zoo3.utils.ALGOS``, which ``train``, ``enjoy``, ``record_video`` and ``push_to_hub`` read) and, where an
algorithm has them, to the sampler and converter tables of ``rl_zoo3.hyperparams_opt``.

What the zoo builds and what the workers need differ in two ways, which :class:`ZooAlgorithm` reconciles:

- **n_envs.** The zoo builds ``n_envs`` envs in the main process and divides ``--eval-freq``/``--save-freq`` by
  ``n_envs``; an async algorithm steps ``n_workers * n_envs_per_worker`` envs inside its workers and calls callbacks
  once per that many steps. So ``n_envs`` must be that total: missing counts are derived from it
  (:func:`resolve_worker_counts`), inconsistent ones are refused. The zoo's envs serve as the *template*: the
  workers build their own copies of the first one (with its ``env_wrapper``, ``frame_stack`` and ``env_kwargs``).
- **Monitor files.** The zoo's training envs log to ``<save_path>/<i>.monitor.csv`` through an open file, which
  cannot travel to the workers; the copy given to the workers logs no file (training episodes reach the logger,
  the progress bar and the callbacks through the workers' reports instead).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from rl_zoo3 import hyperparams_opt
from rl_zoo3.utils import ALGOS
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper

from sb3_async.a3c import A3C
from sb3_async.ae_ddpg import AEDDPG
from sb3_async.apex import ApeXDPG, ApeXDQN
from sb3_async.async_q import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.common.async_algorithm import AsyncAlgorithm
from sb3_async.env_pool.vec_env import PoolVecEnv
from sb3_async.validation import check_int
from sb3_async.zoo import samplers
from sb3_async.zoo.samplers import Converter, Sampler

_PACKAGE = Path(__file__).resolve().parent.parent
#: Folder of the YAML files, ``<algo>.yml`` each: inside the installed package (a wheel ships them as
#: ``sb3_async/zoo_configs``, see setup.py), else beside the package (a source checkout, an editable install).
CONFIG_DIR = next(
    (folder for folder in (_PACKAGE / "zoo_configs", _PACKAGE.parent / "zoo_configs") if folder.is_dir()),
    _PACKAGE / "zoo_configs",
)


def resolve_worker_counts(n_envs: int, n_workers: int | None, n_envs_per_worker: int | None) -> tuple[int, int]:
    """``(n_workers, n_envs_per_worker)`` such that their product is the zoo's ``n_envs``.

    Neither given: one env per worker, as in the paper (``n_workers = n_envs``). One given: the other is
    ``n_envs`` divided by it. Both given: their product must be ``n_envs``.

    :raises ValueError: when the three do not fit together, saying what to pass
    """
    for name, value in (("n_workers", n_workers), ("n_envs_per_worker", n_envs_per_worker)):
        if value is not None:
            check_int(name, value)  # a count >= 1, named, before any arithmetic with it
    if n_workers is None and n_envs_per_worker is None:
        return n_envs, 1
    if n_workers is None or n_envs_per_worker is None:
        given_name = "n_workers" if n_envs_per_worker is None else "n_envs_per_worker"
        given = check_int(given_name, n_workers if n_envs_per_worker is None else n_envs_per_worker)
        if n_envs % given != 0:
            raise ValueError(
                f"n_envs={n_envs} is not a multiple of {given_name}={given!r}: n_envs is the total number of envs, "
                "n_workers * n_envs_per_worker (pass -params n_envs:... with a multiple)"
            )
        other = n_envs // given
        return (given, other) if given_name == "n_workers" else (other, given)
    if n_workers * n_envs_per_worker != n_envs:
        total = n_workers * n_envs_per_worker
        raise ValueError(
            f"n_envs={n_envs} but n_workers={n_workers} x n_envs_per_worker={n_envs_per_worker} = {total}: n_envs is the "
            f"total number of envs, which the zoo divides --eval-freq and --save-freq by. Pass -params n_envs:{total} "
            "(or change n_workers / n_envs_per_worker to match)"
        )
    return n_workers, n_envs_per_worker


def _check_zoo_env(env: VecEnv) -> DummyVecEnv | PoolVecEnv:
    """The ``DummyVecEnv`` under the zoo's VecEnv wrappers (or the pool of a PettingZoo env's copies, see
    :mod:`sb3_async.zoo.pettingzoo_envs`: one slot per agent, or per game for a turn-based game), or a ``ValueError`` for
    what workers cannot take."""
    venv: VecEnv = env
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    if isinstance(venv, PoolVecEnv):  # the zoo builds a pool for a PettingZoo env only: the workers take its factory
        return venv
    if not isinstance(venv, DummyVecEnv):
        raise ValueError(
            f"sb3_async algorithms cannot take a {type(venv).__name__}: their training envs already run in their "
            "own worker processes (n_workers). Use the default --vec-env dummy."
        )
    return venv


def _env_copies(env: VecEnv) -> int:
    """The zoo's ``n_envs``: the envs of ``env``, or the env copies of a PettingZoo env (whose agents are the slots)."""
    base = _check_zoo_env(env)
    return base.pool.n_env_copies if isinstance(base, PoolVecEnv) else env.num_envs


@contextlib.contextmanager
def _without_monitor_files(venv: DummyVecEnv | PoolVecEnv) -> Iterator[None]:
    """Detach the CSV writers of the first env's ``Monitor`` wrappers while the algorithm copies it for the workers
    (an open file cannot be pickled; the workers' copies must not write to the main process' file anyway)."""
    monitors: list[Monitor] = []
    if isinstance(venv, PoolVecEnv):  # a PettingZoo env's copies: no Monitor (the pool reports the episodes)
        yield
        return
    env: gym.Env = venv.envs[0]
    while True:
        if isinstance(env, Monitor):
            monitors.append(env)
        if not isinstance(env, gym.Wrapper):
            break
        env = env.env
    writers = [monitor.results_writer for monitor in monitors]
    for monitor in monitors:
        monitor.results_writer = None
    try:
        yield
    finally:
        for monitor, writer in zip(monitors, writers):
            monitor.results_writer = writer


@dataclass(frozen=True)
class ZooAlgorithm:
    """One sb3_async algorithm as the zoo sees it: called like the class by the zoo's ``ExperimentManager``
    (``ALGOS[algo](env=..., **hyperparams)``) and loaded like it (``ALGOS[algo].load(...)``).

    :param name: the zoo's ``--algo`` value; the config file is ``zoo_configs/<name>.yml``
    :param algo_class: the sb3_async algorithm
    :param sampler: hyperparameter sampler for ``-optimize`` (the zoo's signature), None if there is none yet
    :param converter: turns a trial's sampled values into hyperparameters (``--storage ... --trial-id``)
    :param worker_names: the algorithm's names for the worker count and the envs per worker (Ape-X: actors); None for
        an algorithm that steps the zoo's ``n_envs`` envs itself (AEDDPG: copies of them in an ``AsyncEnvPool``)
    """

    name: str
    algo_class: type[AsyncAlgorithm] | type[AEDDPG]
    sampler: Sampler | None = None
    converter: Converter | None = None
    worker_names: tuple[str, str] | None = ("n_workers", "n_envs_per_worker")

    @property
    def __name__(self) -> str:  # type: ignore[override]  # push_to_hub reads ALGOS[algo].__name__
        return self.algo_class.__name__

    @property
    def config_path(self) -> Path:
        return CONFIG_DIR / f"{self.name}.yml"

    def _worker_kwargs(self, env: VecEnv, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.worker_names is None:
            return {}
        workers, envs_per_worker = self.worker_names
        n_workers, n_envs_per_worker = kwargs.pop(workers, None), kwargs.pop(envs_per_worker, None)
        if workers != "n_workers":  # the generic names (the benchmark's scaling suite) work for every algorithm
            n_workers = kwargs.pop("n_workers", n_workers)
            n_envs_per_worker = kwargs.pop("n_envs_per_worker", n_envs_per_worker)
        counts = resolve_worker_counts(_env_copies(env), n_workers, n_envs_per_worker)
        return dict(zip(self.worker_names, counts))

    def __call__(self, policy: Any, env: Any, **kwargs: Any) -> AsyncAlgorithm | AEDDPG:
        """Build the algorithm on the zoo's VecEnv of ``n_envs`` envs (see the module docstring)."""
        if not isinstance(env, VecEnv):
            return self.algo_class(policy, env, **kwargs)
        base = _check_zoo_env(env)
        kwargs.update(self._worker_kwargs(env, kwargs))
        with _without_monitor_files(base):
            return self.algo_class(policy, env, **kwargs)

    def load(self, path: Any, env: VecEnv | None = None, **kwargs: Any) -> AsyncAlgorithm | AEDDPG:
        """``algo_class.load``; with an env (continued training, ``record_video``) checked and copied as in
        :meth:`__call__`; worker counts in ``kwargs`` are resolved against ``env.num_envs``, else the saved ones stay.

        Continued training (``-i``) resumes from the state saved with the model: its ``VecNormalize`` statistics
        (those of the moment it was saved, not of a ``vecnormalize.pkl`` written at another moment) and, for a
        checkpoint ``<prefix>_<N>_steps.zip``, the replay buffer saved beside it (``<prefix>_replay_buffer_<N>_steps.pkl``,
        written with ``--save-replay-buffer``)."""
        if not isinstance(env, VecEnv):
            return self.algo_class.load(path, env=env, **kwargs)
        base = _check_zoo_env(env)
        if any(name in kwargs for name in (*(self.worker_names or ()), "n_workers", "n_envs_per_worker")):
            kwargs.update(self._worker_kwargs(env, kwargs))
        with _without_monitor_files(base):
            model = self.algo_class.load(path, env=env, **kwargs)
        if isinstance(model, AsyncAlgorithm):
            model.load_saved_normalization()
        replay = checkpoint_replay_path(path)
        if replay is not None and replay.is_file() and hasattr(model, "load_replay_buffer"):
            model.load_replay_buffer(replay)
        return model


def checkpoint_replay_path(path: Any) -> Path | None:
    """The replay buffer file ``CheckpointCallback`` writes beside the checkpoint ``path``
    (``<prefix>_<N>_steps.zip`` → ``<prefix>_replay_buffer_<N>_steps.pkl``); None if ``path`` is not a checkpoint's."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    match = re.fullmatch(r"(.*)_(\d+)_steps(\.zip)?", Path(path).name)
    if match is None:
        return None
    return Path(path).with_name(f"{match.group(1)}_replay_buffer_{match.group(2)}_steps.pkl")


#: The algorithms registered in the zoo, one entry each (a new algorithm joins with one line and its YAML file).
ZOO_ALGORITHMS: tuple[ZooAlgorithm, ...] = (
    ZooAlgorithm("a3c", A3C, samplers.sample_a3c_params, samplers.convert_a3c_params),
    ZooAlgorithm("async_one_step_q", AsyncOneStepQ, samplers.sample_async_q_params, samplers.convert_async_q_params),
    ZooAlgorithm("async_sarsa", AsyncSarsa, samplers.sample_async_q_params, samplers.convert_async_q_params),
    ZooAlgorithm("async_n_step_q", AsyncNStepQ, samplers.sample_async_q_params, samplers.convert_async_q_params),
    ZooAlgorithm("apex_dqn", ApeXDQN, worker_names=("n_actors", "n_envs_per_actor")),
    ZooAlgorithm("apex_dpg", ApeXDPG, worker_names=("n_actors", "n_envs_per_actor")),
    ZooAlgorithm("ae_ddpg", AEDDPG, samplers.sample_ae_ddpg_params, samplers.convert_ae_ddpg_params, worker_names=None),
)


def zoo_algorithm(name: str) -> ZooAlgorithm | None:
    """The entry of ``name`` in :data:`ZOO_ALGORITHMS`, None if it is not one of ours."""
    return next((entry for entry in ZOO_ALGORITHMS if entry.name == name), None)


def register() -> None:
    """Add every entry of :data:`ZOO_ALGORITHMS` to the zoo's algorithm, sampler and converter tables (idempotent).

    These are the tables the zoo looks algorithms up in: adding entries to them changes none of the zoo's code."""
    for entry in ZOO_ALGORITHMS:
        existing = ALGOS.get(entry.name)
        if existing is not None and existing != entry:
            raise ValueError(f"The zoo already has an algorithm named {entry.name!r} ({existing})")
        ALGOS[entry.name] = entry  # type: ignore[assignment]
        if entry.sampler is not None:
            hyperparams_opt.HYPERPARAMS_SAMPLER[entry.name] = entry.sampler  # type: ignore[assignment]
        if entry.converter is not None:
            hyperparams_opt.HYPERPARAMS_CONVERTER[entry.name] = entry.converter  # type: ignore[assignment]
