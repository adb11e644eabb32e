"""Optuna samplers and converters of our algorithms, in the zoo's signatures (``rl_zoo3.hyperparams_opt``).

A sampler draws a trial's hyperparameters for ``-optimize``; its converter turns the values Optuna stored for a trial
(``trial.params``) back into constructor arguments for ``--storage ... --trial-id``. Each sampler goes through its
converter, so that both give the same arguments for the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from torch import nn

#: The zoo's sampler signature: ``(trial, n_actions, n_envs, additional_args) -> hyperparameters``.
Sampler = Callable[[optuna.Trial, int, int, dict[str, Any]], dict[str, Any]]
#: The zoo's converter signature: a trial's sampled values -> hyperparameters.
Converter = Callable[[dict[str, Any]], dict[str, Any]]

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


def _sample_paper_params(trial: optuna.Trial) -> dict[str, Any]:
    """The ranges both samplers share: the learning rate from LogUniform(1e-4, 1e-2), the paper's range (supp. §2);
    ``n_steps`` (t_max) around the paper's 5; the discount as ``one_minus_gamma``, log-uniform (the zoo's way)."""
    one_minus_gamma = trial.suggest_float("one_minus_gamma", 0.0001, 0.03, log=True)
    trial.set_user_attr("gamma", 1 - one_minus_gamma)
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
        "n_steps": trial.suggest_categorical("n_steps", [5, 8, 16, 32]),
        "one_minus_gamma": one_minus_gamma,
    }


def sample_a3c_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """Sampler for A3C hyperparameters, in the zoo's sampler signature.

    The learning rate is drawn from LogUniform(1e-4, 1e-2), the paper's range (supp. §2); ``n_steps`` (t_max) around
    the paper's 5; the other ranges are those of the zoo's A2C sampler. The worker counts are not sampled: they
    follow ``n_envs`` (see :func:`sb3_async.zoo.resolve_worker_counts`).
    """
    return convert_a3c_params(
        {
            **_sample_paper_params(trial),
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
    return convert_async_q_params(
        {
            **_sample_paper_params(trial),
            "target_update_interval": trial.suggest_categorical("target_update_interval", [500, 1000, 2000, 5000, 10000]),
            "exploration_fraction": trial.suggest_float("exploration_fraction", 0.02, 0.3),
            "loss": trial.suggest_categorical("loss", ["mse", "huber"]),
            "net_arch": trial.suggest_categorical("net_arch", ["tiny", "small", "medium"]),
        }
    )


def convert_ae_ddpg_params(sampled_params: dict[str, Any]) -> dict[str, Any]:
    """Optuna's sampled values to AEDDPG constructor arguments (``-optimize``, ``--trial-id``): ``rho``, the
    probability of sampling from HMemory, goes to the episodic dual replay."""
    hyperparams = dict(sampled_params)
    hyperparams["replay_buffer_kwargs"] = dict(rho=hyperparams.pop("rho"))
    return hyperparams


def sample_ae_ddpg_params(trial: optuna.Trial, n_actions: int, n_envs: int, additional_args: dict[str, Any]) -> dict[str, Any]:
    """Sampler for AEDDPG, in the zoo's sampler signature: the choices the paper fixes for its long runs and those it
    leaves open.

    - ``learning_rate`` from LogUniform(3e-5, 3e-3), around the paper's 1e-4 (MuJoCo) and 3e-4 (§V-B);
    - ``tau`` around the paper's 1e-3 (eq. 4), ``batch_size`` around its 128 and 96;
    - ``rho``, the probability of a batch from HMemory, in the paper's range [0.05, 0.25] (§V-B, tuned there "according
      to the number of interaction threads");
    - ``updates_per_transition`` and ``learning_starts``, which the paper does not give ("balance the speed of data
      generation and the speed of data utilization", §IV-B).

    The number of envs is the zoo's ``n_envs`` (``-params n_envs:8``; the zoo builds the envs before it samples) and
    the random-walk noise keeps its default.
    """
    return convert_ae_ddpg_params(
        {
            "learning_rate": trial.suggest_float("learning_rate", 3e-5, 3e-3, log=True),
            "tau": trial.suggest_categorical("tau", [0.001, 0.002, 0.005, 0.01, 0.02]),
            "batch_size": trial.suggest_categorical("batch_size", [64, 96, 128, 256]),
            "rho": trial.suggest_float("rho", 0.05, 0.25),
            "updates_per_transition": trial.suggest_categorical("updates_per_transition", [0.25, 0.5, 1.0, 2.0]),
            "learning_starts": trial.suggest_categorical("learning_starts", [1000, 5000, 10000, 25000]),
        }
    )
