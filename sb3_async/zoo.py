"""The sb3_async algorithms inside the RL Baselines3 Zoo, without forking it.

:func:`register` adds one entry per algorithm of :data:`ZOO_ALGORITHMS` to the zoo's own tables: the algorithm table
(``rl_zoo3.utils.ALGOS``, which ``train``, ``enjoy``, ``record_video`` and ``push_to_hub`` read) and, where the
algorithm has one, the hyperparameter sampler and converter tables of ``rl_zoo3.hyperparams_opt`` (``-optimize``,
``--trial-id``). :func:`zoo_argv` points the zoo at our YAML files (``zoo_configs/<algo>.yml``) when no
``--conf-file`` is given. ``sb3_async.train`` and ``sb3_async.enjoy`` then run the zoo's own ``train()``/``enjoy()``.

What the zoo builds and what the workers need differ in two ways, which :class:`ZooAlgorithm` reconciles:

- **n_envs.** The zoo builds ``n_envs`` envs in the main process and divides ``--eval-freq``/``--save-freq`` by
  ``n_envs``; an async algorithm steps ``n_workers * n_envs_per_worker`` envs inside its workers and calls callbacks
  once per that many steps. So ``n_envs`` must be that total: missing counts are derived from it
  (:func:`resolve_worker_counts`), inconsistent ones are refused. The zoo's envs serve as the *template*: the
  workers build their own copies of the first one (with its ``env_wrapper``, ``frame_stack`` and ``env_kwargs``).
- **Monitor files.** The zoo's training envs log to ``<save_path>/<i>.monitor.csv`` through an open file, which
  cannot travel to the workers; the copy given to the workers logs no file (training episodes reach the logger,
  the progress bar and the callbacks through the workers' reports instead).

``normalize`` (``VecNormalize``) works as for SB3: the workers share its running statistics
(:mod:`sb3_async.common.normalization`) and the zoo saves them as ``vecnormalize.pkl``; ``--vec-env subproc`` on
the command line is replaced by ``dummy`` with a note (a ``SubprocVecEnv`` built through the Python API fails with a
``ValueError``). See ``docs/guide/zoo.md``.

A multi-agent PettingZoo env is named by an id of PettingZoo's registry (``--env butterfly/pistonball-v6``) or by
``<package>/<module>`` (``--env mpe2/simple_spread_v3``), its arguments from the YAML's ``env_kwargs`` or
``--env-kwargs``: :func:`pettingzoo_envs` registers that id in gymnasium's registry for the zoo's checks and has the
zoo build ``n_envs`` env copies as an :class:`~sb3_async.env_pool.AsyncEnvPool` VecEnv, one slot per agent (parameter
sharing), for every algorithm, ours or the zoo's. See ``docs/guide/pettingzoo.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import gymnasium as gym
import numpy as np
import optuna
from rl_zoo3 import hyperparams_opt
from rl_zoo3.utils import ALGOS
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper
from torch import nn

from sb3_async.a3c import A3C
from sb3_async.ae_ddpg import AEDDPG
from sb3_async.apex import ApeXDPG, ApeXDQN
from sb3_async.async_q import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.common.async_algorithm import AsyncAlgorithm
from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.multi_agent import PettingZooEnv, pettingzoo_env_id
from sb3_async.env_pool.vec_env import PoolVecEnv

Sampler = Callable[[optuna.Trial, int, int, dict[str, Any]], dict[str, Any]]
Converter = Callable[[dict[str, Any]], dict[str, Any]]

_HERE = Path(__file__).resolve().parent
#: Folder of the YAML files, ``<algo>.yml`` each: inside the installed package (a wheel ships them as
#: ``sb3_async/zoo_configs``, see setup.py), else beside the package (a source checkout, an editable install).
CONFIG_DIR = next(
    (folder for folder in (_HERE / "zoo_configs", _HERE.parent / "zoo_configs") if folder.is_dir()), _HERE / "zoo_configs"
)

_NET_ARCHS = {
    "tiny": dict(pi=[64], vf=[64]),
    "small": dict(pi=[64, 64], vf=[64, 64]),
    "medium": dict(pi=[256, 256], vf=[256, 256]),
}
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def convert_a3c_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """Optuna's sampled values (``trial.params``) to A3C constructor arguments (``-optimize``, ``--trial-id``)."""
    hyperparams = dict(sampled_params)
    hyperparams["gamma"] = 1 - hyperparams.pop("one_minus_gamma")
    net_arch = _NET_ARCHS[hyperparams.pop("net_arch")]
    activation_fn = _ACTIVATIONS[hyperparams.pop("activation_fn")]
    hyperparams["policy_kwargs"] = dict(net_arch=net_arch, activation_fn=activation_fn)
    return hyperparams


def sample_a3c_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """Sampler for A3C hyperparameters, in the zoo's sampler signature.

    The learning rate is drawn from LogUniform(1e-4, 1e-2), the paper's range (supp. §2); ``n_steps`` (t_max) around
    the paper's 5; the other ranges are those of the zoo's A2C sampler. The worker counts are not sampled: they
    follow ``n_envs`` (see :func:`resolve_worker_counts`).
    """
    one_minus_gamma = trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True)
    trial.set_user_attr("gamma", 1 - one_minus_gamma)
    return convert_a3c_params(
        {
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
            "n_steps": trial.suggest_categorical("n_steps", [5, 8, 16, 32]),
            "one_minus_gamma": one_minus_gamma,
            "ent_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
            "vf_coef": trial.suggest_float("vf_coef", 0.25, 1.0),
            "max_grad_norm": trial.suggest_float("max_grad_norm", 0.3, 5.0, log=True),
            "net_arch": trial.suggest_categorical("net_arch", ["tiny", "small", "medium"]),
            "activation_fn": trial.suggest_categorical("activation_fn", ["tanh", "relu"]),
        }
    )


_Q_NET_ARCHS = {"tiny": [64], "small": [64, 64], "medium": [256, 256]}


def convert_async_q_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """Optuna's sampled values to constructor arguments of the async Q family (``-optimize``, ``--trial-id``)."""
    hyperparams = dict(sampled_params)
    hyperparams["gamma"] = 1 - hyperparams.pop("one_minus_gamma")
    hyperparams["policy_kwargs"] = dict(net_arch=_Q_NET_ARCHS[hyperparams.pop("net_arch")])
    return hyperparams


def sample_async_q_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """Sampler for AsyncOneStepQ, AsyncSarsa and AsyncNStepQ, in the zoo's sampler signature.

    The learning rate is drawn from LogUniform(1e-4, 1e-2), the paper's range (supp. §2); ``n_steps``
    (I_AsyncUpdate / t_max) around the paper's 5; the target-network interval, exploration fraction, loss and
    network sizes from ranges like the zoo's DQN sampler. The paper's per-worker ε distribution is kept.
    """
    one_minus_gamma = trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True)
    trial.set_user_attr("gamma", 1 - one_minus_gamma)
    return convert_async_q_params(
        {
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
            "n_steps": trial.suggest_categorical("n_steps", [5, 8, 16, 32]),
            "one_minus_gamma": one_minus_gamma,
            "target_update_interval": trial.suggest_categorical("target_update_interval", [500, 1000, 2000, 5000, 10000]),
            "exploration_fraction": trial.suggest_float("exploration_fraction", 0.02, 0.3),
            "loss": trial.suggest_categorical("loss", ["mse", "huber"]),
            "net_arch": trial.suggest_categorical("net_arch", ["tiny", "small", "medium"]),
        }
    )


def resolve_worker_counts(n_envs: int, n_workers: int | None, n_envs_per_worker: int | None) -> tuple[int, int]:
    """``(n_workers, n_envs_per_worker)`` such that their product is the zoo's ``n_envs``.

    Neither given: one env per worker, as in the paper (``n_workers = n_envs``). One given: the other is
    ``n_envs`` divided by it. Both given: their product must be ``n_envs``.

    :raises ValueError: when the three do not fit together, saying what to pass
    """
    if n_workers is None and n_envs_per_worker is None:
        return n_envs, 1
    if n_workers is None or n_envs_per_worker is None:
        given_name, given = ("n_workers", n_workers) if n_envs_per_worker is None else ("n_envs_per_worker", n_envs_per_worker)
        if not isinstance(given, int) or given < 1 or n_envs % given != 0:
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
    :func:`pettingzoo_envs`), or a ``ValueError`` for what workers cannot take."""
    venv: VecEnv = env
    while isinstance(venv, VecEnvWrapper):
        venv = venv.venv
    if isinstance(venv, PoolVecEnv) and venv.pool.env_agents:
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


@contextlib.contextmanager
def _resumable_runs() -> Iterator[None]:
    """What the zoo's ``train`` does for our algorithms on top of its own:

    - its ``--save-freq`` checkpoints also save the replay buffer (with ``--save-replay-buffer``) and the
      ``VecNormalize`` statistics (with ``normalize``), so that ``-i <checkpoint>`` resumes with them
      (:meth:`ZooAlgorithm.load`); the zoo itself saves those only at the end of training;
    - continued training (``-i``) continues the step count (``learn(reset_num_timesteps=False)``): ``-n N`` trains
      ``N`` more steps, and the schedules, logs and checkpoint names go on from the saved count.
    """
    from rl_zoo3.exp_manager import ExperimentManager

    create_callbacks, learn = ExperimentManager.create_callbacks, ExperimentManager.learn

    def continuing(manager: ExperimentManager, model: Any) -> None:
        if not (manager.continue_training and zoo_algorithm(manager.algo) is not None):
            learn(manager, model)
            return
        with mock.patch.object(model, "learn", functools.partial(model.learn, reset_num_timesteps=False)):
            learn(manager, model)

    def with_state(manager: ExperimentManager) -> None:
        create_callbacks(manager)
        if zoo_algorithm(manager.algo) is None:
            return
        for callback in manager.callbacks:
            if isinstance(callback, CheckpointCallback):
                callback.save_replay_buffer = bool(manager.save_replay_buffer)
                callback.save_vecnormalize = bool(manager.normalize)

    with (
        mock.patch.object(ExperimentManager, "create_callbacks", with_state),
        mock.patch.object(ExperimentManager, "learn", continuing),
    ):
        yield


class _CopyDones(np.ndarray):
    """The dones of the slots of one env copy, true as a whole when every slot's episode ended (the zoo's ``enjoy``
    loop tests ``if done`` when it steps one env)."""

    def __bool__(self) -> bool:
        return bool(np.asarray(self).all())


class _OneCopyVecEnv(VecEnvWrapper):
    """The slots of one copy of a PettingZoo env, stepped by the zoo's ``enjoy``, ``record_video`` and
    ``push_to_hub`` loops as one env: its dones are true as a whole when the copy's episode ends, and those loops
    report the first agent's return (its ``reward[0]``)."""

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        return obs, rewards, dones.view(_CopyDones), infos


def make_pettingzoo_vec_env(
    pettingzoo_id: str,
    env_id: Any = None,
    n_envs: int = 1,
    seed: int | None = None,
    start_index: int = 0,
    monitor_dir: str | None = None,
    wrapper_class: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    vec_env_cls: type[VecEnv] | None = None,
    vec_env_kwargs: dict[str, Any] | None = None,
    monitor_kwargs: dict[str, Any] | None = None,
    wrapper_kwargs: dict[str, Any] | None = None,
    *,
    one_copy_as_one_env: bool = False,
) -> VecEnv:
    """What the zoo's ``make_vec_env`` calls build for the PettingZoo env ``pettingzoo_id`` (then SB3's
    ``make_vec_env`` arguments; its ``env_id``, the zoo's maker, is not used): ``n_envs`` copies of the env
    (:class:`~sb3_async.env_pool.multi_agent.PettingZooEnv` with ``env_kwargs``) in an
    :class:`~sb3_async.env_pool.AsyncEnvPool`, as its VecEnv: one slot per agent. The copies step in this process
    (``--vec-env dummy``) or in the pool's worker processes (``subproc``). The pool reports each agent's episodes in
    ``info["episode"]``; no Monitor file is written.

    :param one_copy_as_one_env: with ``n_envs=1``, dones that are true as a whole when the copy's episode ends (for
        the loops of the zoo's scripts that step one env, see :class:`_OneCopyVecEnv`)
    :raises ValueError: for an ``env_wrapper`` (gymnasium wrappers cannot wrap a PettingZoo env)
    """
    if wrapper_class is not None:
        raise ValueError(
            f"env_wrapper cannot wrap the PettingZoo env {pettingzoo_id}: gymnasium wrappers take a gymnasium env"
        )
    n_workers = 0 if vec_env_cls in (None, DummyVecEnv) else None
    pool = AsyncEnvPool(PettingZooEnv(pettingzoo_id, env_kwargs), n_envs=n_envs, n_workers=n_workers)
    venv: VecEnv = pool.as_vec_env()
    venv.seed(seed)
    return _OneCopyVecEnv(venv) if one_copy_as_one_env and n_envs == 1 else venv


def _not_a_gymnasium_env(**kwargs: Any) -> gym.Env:
    raise TypeError(
        "This id names a multi-agent PettingZoo env, which gymnasium.make cannot build: give AsyncEnvPool a factory of it"
        " (sb3_async.env_pool.multi_agent.PettingZooEnv)"
    )


@contextlib.contextmanager
def pettingzoo_envs(argv: Sequence[str]) -> Iterator[str | None]:
    """If ``--env`` in ``argv`` is not a gymnasium id but names a PettingZoo env
    (:class:`~sb3_async.env_pool.multi_agent.PettingZooEnv`: ``butterfly/pistonball-v6``, ``mpe2/simple_spread_v3``):
    register it in gymnasium's registry (the zoo looks the id up there) and have the zoo's ``make_vec_env`` build pools
    of its copies (:func:`make_pettingzoo_vec_env`), for ``train``, ``enjoy`` and ``record_video``, any algorithm.
    ``n_envs`` counts env copies; ``--eval-freq`` and ``--save-freq`` count steps of all the slots (the zoo divides
    them by ``n_envs``; they are divided by the agents as well, as each call of the callbacks sees a step of every slot).

    :return: (as the context's value) the PettingZoo id, or None for any other ``--env``
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--env", default=None)
    parser.add_argument("--gym-packages", nargs="+", default=[])
    args, _ = parser.parse_known_args(list(argv))
    for package in args.gym_packages:  # as the zoo does, before it looks the id up
        importlib.import_module(package)
    env_id = None if args.env is None or args.env in gym.envs.registry else pettingzoo_env_id(args.env)
    if env_id is None:
        yield None
        return
    from rl_zoo3 import exp_manager, utils
    from rl_zoo3.exp_manager import ExperimentManager

    make = functools.partial(make_pettingzoo_vec_env, env_id)
    create_callbacks = ExperimentManager.create_callbacks

    def per_slot_callbacks(manager: ExperimentManager) -> None:
        if manager._eval_env_kwargs_args is None:  # the YAML's env_kwargs (continuous_actions...) for the eval env too
            manager.eval_env_kwargs = manager.env_kwargs
        create_callbacks(manager)
        agents = len(PettingZooEnv(env_id, manager.env_kwargs)().possible_agents)
        for callback in manager.callbacks:
            if isinstance(callback, CheckpointCallback):
                callback.save_freq = max(callback.save_freq // agents, 1)
            elif isinstance(callback, EvalCallback):
                callback.eval_freq = max(callback.eval_freq // agents, 1)

    gym.register(id=env_id, entry_point=_not_a_gymnasium_env, disable_env_checker=True, order_enforce=False)
    try:
        with (
            mock.patch.object(exp_manager, "make_vec_env", make),
            mock.patch.object(utils, "make_vec_env", functools.partial(make, one_copy_as_one_env=True)),
            mock.patch.object(ExperimentManager, "create_callbacks", per_slot_callbacks),
        ):
            yield env_id
    finally:
        gym.envs.registry.pop(env_id, None)


#: The algorithms registered in the zoo, one entry each (a new algorithm joins with one line and its YAML file).
ZOO_ALGORITHMS: tuple[ZooAlgorithm, ...] = (
    ZooAlgorithm("a3c", A3C, sample_a3c_params, convert_a3c_params),
    ZooAlgorithm("async_one_step_q", AsyncOneStepQ, sample_async_q_params, convert_async_q_params),
    ZooAlgorithm("async_sarsa", AsyncSarsa, sample_async_q_params, convert_async_q_params),
    ZooAlgorithm("async_n_step_q", AsyncNStepQ, sample_async_q_params, convert_async_q_params),
    ZooAlgorithm("apex_dqn", ApeXDQN, worker_names=("n_actors", "n_envs_per_actor")),
    ZooAlgorithm("apex_dpg", ApeXDPG, worker_names=("n_actors", "n_envs_per_actor")),
    ZooAlgorithm("ae_ddpg", AEDDPG, worker_names=None),
)


def zoo_algorithm(name: str) -> ZooAlgorithm | None:
    """The entry of ``name`` in :data:`ZOO_ALGORITHMS`, None if it is not one of ours."""
    return next((entry for entry in ZOO_ALGORITHMS if entry.name == name), None)


def register() -> None:
    """Add every entry of :data:`ZOO_ALGORITHMS` to the zoo's algorithm, sampler and converter tables (idempotent)."""
    for entry in ZOO_ALGORITHMS:
        existing = ALGOS.get(entry.name)
        if existing is not None and existing != entry:
            raise ValueError(f"The zoo already has an algorithm named {entry.name!r} ({existing})")
        ALGOS[entry.name] = entry  # type: ignore[assignment]
        if entry.sampler is not None:
            hyperparams_opt.HYPERPARAMS_SAMPLER[entry.name] = entry.sampler  # type: ignore[assignment]
        if entry.converter is not None:
            hyperparams_opt.HYPERPARAMS_CONVERTER[entry.name] = entry.converter  # type: ignore[assignment]


def _pre_parse(argv: Sequence[str], options: dict[str, tuple[str, ...]], algo_default: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--algo", default=algo_default)
    for dest, flags in options.items():
        parser.add_argument(*flags, dest=dest, default=None)
    namespace, _ = parser.parse_known_args(list(argv))
    return namespace


def zoo_argv(argv: Sequence[str], script: str) -> list[str]:
    """``argv`` for the zoo's ``script`` (``"train"``, ``"enjoy"`` or ``"record_video"``), with our defaults added
    for our algorithms.

    - ``train``: ``--conf-file zoo_configs/<algo>.yml`` unless a config file is given; ``--vec-env subproc``
      becomes ``dummy``, with a note on stderr: the envs the zoo builds are only a template (the workers, separate
      processes already, build their own copies), and a ``SubprocVecEnv`` cannot be copied to them;
    - ``enjoy`` and ``record_video``: ``--folder logs`` (where ``train`` saves) unless a folder is given: the zoo's default,
      ``rl-trained-agents``, would try to download the agent from the Hugging Face Hub.

    Other algorithms' arguments pass unchanged.
    """
    argv = list(argv)
    if script == "train":
        args = _pre_parse(argv, {"conf_file": ("-conf", "--conf-file"), "vec_env": ("--vec-env",)}, algo_default="ppo")
        entry = zoo_algorithm(args.algo)
        if entry is not None and args.vec_env == "subproc":
            print(
                f"sb3_async: --vec-env subproc is replaced by dummy for {args.algo}: its workers are separate "
                "processes already (n_workers), each stepping its own copies of the env",
                file=sys.stderr,
            )
            argv += ["--vec-env", "dummy"]
        if entry is not None and args.conf_file is None:
            if not entry.config_path.is_file():
                raise FileNotFoundError(
                    f"No zoo config for {args.algo!r} at {entry.config_path}: pass one with --conf-file PATH"
                )
            argv += ["--conf-file", str(entry.config_path)]
    elif script in ("enjoy", "record_video"):
        args = _pre_parse(argv, {"folder": ("-f", "--folder")}, algo_default="ppo")
        if zoo_algorithm(args.algo) is not None and args.folder is None:
            argv += ["--folder", "logs"]
    else:
        raise ValueError(f"Invalid script={script!r}: expected 'train', 'enjoy' or 'record_video'")
    return argv


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = [saved[0] if saved else "sb3_async", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def cli_help(script: str) -> str:
    """What ``--help`` says of sb3_async before the zoo's own help for ``script``."""
    names = ", ".join(entry.name for entry in ZOO_ALGORITHMS)
    lines = [
        f"sb3_async: the RL Zoo's own {script} script, with sb3_async's algorithms registered ({names}).",
        "For these algorithms:",
    ]
    if script == "train":
        lines += [
            f"  - hyperparameters come from {CONFIG_DIR}/<algo>.yml unless --conf-file is given;",
            "  - n_envs in those files is the total number of envs: n_workers x n_envs_per_worker (override with",
            "    -params n_envs:16 n_workers:2 n_envs_per_worker:8);",
            "  - --vec-env subproc becomes dummy: the workers are separate processes already, each stepping its own envs;",
            "  - models are saved under logs/<algo>/<env>_<run id>/ (-f/--log-folder changes logs/).",
        ]
    else:
        lines += ["  - models are read from logs/ (where train saves them) unless -f/--folder is given."]
    lines += ["Everything else is the zoo's; its options follow.", ""]
    return "\n".join(lines)


def run_zoo(script: str, argv: Sequence[str] | None = None) -> None:
    """Register our algorithms, then run the zoo's own ``train()``, ``enjoy()`` or ``record_video`` script on
    ``argv`` (default: ``sys.argv[1:]``) completed by :func:`zoo_argv`."""
    register()
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(cli_help(script))
    full_argv = zoo_argv(argv, script)
    with _argv(full_argv), pettingzoo_envs(full_argv):
        if script == "train":
            from rl_zoo3.train import train

            with _resumable_runs():
                train()
        elif script == "enjoy":
            from rl_zoo3.enjoy import enjoy

            enjoy()
        else:  # the zoo's record_video is a script (its code under `if __name__ == "__main__"`): run it as one
            import runpy

            runpy.run_module("rl_zoo3.record_video", run_name="__main__", alter_sys=False)
