"""The sb3_async algorithms inside the RL Baselines3 Zoo, without forking it.

:func:`register` adds one entry per algorithm of :data:`ZOO_ALGORITHMS` to the zoo's own tables: the algorithm table
(``rl_zoo3.utils.ALGOS``, which ``train``, ``enjoy``, ``record_video`` and ``push_to_hub`` read) and, where the
algorithm has one, the hyperparameter sampler and converter tables of ``rl_zoo3.hyperparams_opt`` (``-optimize``,
``--trial-id``). :func:`zoo_argv` points the zoo at our YAML files (``zoo_configs/<algo>.yml``) when no
``--conf-file`` is given. ``sb3_async.train`` and ``sb3_async.enjoy`` then run the zoo's own ``train()``/``enjoy()``
(:func:`run_zoo`), ``train()`` with :class:`ZooExperimentManager`, the zoo's ``ExperimentManager`` with checkpoints
that resume and continued runs that continue the step count.

The modules, one job each:

- :mod:`sb3_async.zoo.samplers`: the Optuna samplers and converters of our algorithms;
- :mod:`sb3_async.zoo.algorithms`: :class:`ZooAlgorithm` (what the zoo builds vs. what the workers need: ``n_envs``
  is ``n_workers * n_envs_per_worker``, the zoo's envs are a template without Monitor files) and the registration;
- :mod:`sb3_async.zoo.experiment`: :class:`ZooExperimentManager`;
- :mod:`sb3_async.zoo.pettingzoo_envs`: multi-agent PettingZoo envs as ``--env`` (``butterfly/pistonball-v6``,
  ``mpe2/simple_spread_v3``), built as :class:`~sb3_async.env_pool.AsyncEnvPool` VecEnvs of ``n_envs`` env copies,
  one slot per agent, for every algorithm (see ``docs/guide/pettingzoo.md``);
- :mod:`sb3_async.zoo.cli`: the command line of ``sb3_async.train``, ``sb3_async.enjoy`` and ``sb3_async.record_video``.

``normalize`` (``VecNormalize``) works as for SB3: the workers share its running statistics
(:mod:`sb3_async.common.normalization`) and the zoo saves them as ``vecnormalize.pkl``; ``--vec-env subproc`` on
the command line is replaced by ``dummy`` with a note (a ``SubprocVecEnv`` built through the Python API fails with a
``ValueError``). See ``docs/guide/zoo.md``.
"""

from sb3_async.zoo.algorithms import (
    CONFIG_DIR,
    ZOO_ALGORITHMS,
    ZooAlgorithm,
    checkpoint_replay_path,
    register,
    resolve_worker_counts,
    zoo_algorithm,
)
from sb3_async.zoo.cli import cli_help, run_zoo, zoo_argv
from sb3_async.zoo.experiment import ZooExperimentManager
from sb3_async.zoo.pettingzoo_envs import make_pettingzoo_vec_env, pettingzoo_envs
from sb3_async.zoo.samplers import (
    Converter,
    Sampler,
    convert_a3c_params,
    convert_ae_ddpg_params,
    convert_async_q_params,
    sample_a3c_params,
    sample_ae_ddpg_params,
    sample_async_q_params,
)

__all__ = [
    "CONFIG_DIR",
    "ZOO_ALGORITHMS",
    "Converter",
    "Sampler",
    "ZooAlgorithm",
    "ZooExperimentManager",
    "checkpoint_replay_path",
    "cli_help",
    "convert_a3c_params",
    "convert_ae_ddpg_params",
    "convert_async_q_params",
    "make_pettingzoo_vec_env",
    "pettingzoo_envs",
    "register",
    "resolve_worker_counts",
    "run_zoo",
    "sample_a3c_params",
    "sample_ae_ddpg_params",
    "sample_async_q_params",
    "zoo_algorithm",
    "zoo_argv",
]
