"""The zoo's ``ExperimentManager`` with what our algorithms and PettingZoo envs need on top of it.

``python -m sb3_async.train`` runs the zoo's own ``train()`` with :class:`ZooExperimentManager` in place of
``ExperimentManager`` (see :func:`sb3_async.zoo.cli.run_zoo`); code that builds a manager itself (the benchmark, the
tests) can use either class: for a gymnasium env and a run from scratch both build the same model.
"""

from __future__ import annotations

import time
from typing import Any, cast

from rl_zoo3.callbacks import TrialEvalCallback
from rl_zoo3.exp_manager import ExperimentManager
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
from stable_baselines3.common.vec_env import VecEnv

from sb3_async.common.masks import masking_supported
from sb3_async.env_pool.turns import OPPONENTS
from sb3_async.games.league import OpponentPool
from sb3_async.validation import check_nonnegative
from sb3_async.zoo.algorithms import zoo_algorithm
from sb3_async.zoo.pettingzoo_envs import env_agents, make_pettingzoo_vec_env, registered_pettingzoo_id


def zoo_opponent(value: Any, pettingzoo_id: str | None) -> Any:
    """The ``opponent`` hyperparameter as ``TurnBasedGame`` takes it: ``"self"``, ``"random"`` or ``"league"`` as
    they are, a dict as the arguments of an :class:`~sb3_async.games.OpponentPool` (a league with those settings,
    e.g. ``{snapshot_interval: 200, size: 10}``).

    :raises ValueError: for an env that is not a PettingZoo game, or another value
    """
    if pettingzoo_id is None:
        raise ValueError(
            f"Invalid hyperparameter opponent={value!r}: it chooses who plays the other seats of a turn-based"
            " PettingZoo game (e.g. --env classic/connect_four-v3), and this env is a gymnasium env"
        )
    if isinstance(value, dict):
        try:
            return OpponentPool(**value)
        except TypeError as error:
            raise ValueError(f"Invalid hyperparameter opponent={value!r}: {error} (OpponentPool's arguments)") from None
    if isinstance(value, str) and value in OPPONENTS:
        return value
    raise ValueError(
        f"Invalid hyperparameter opponent={value!r}: expected one of {', '.join(map(repr, OPPONENTS))} or a dict of"
        " OpponentPool's arguments"
    )


class BudgetedTrialEvalCallback(TrialEvalCallback):
    """The zoo's evaluation of an Optuna trial, with a training budget in seconds (``--trial-seconds``).

    Training stops once it has run ``train_seconds`` (wall clock from the start of ``learn()``, the time of the
    evaluations left out); the policy it ends with is evaluated then, and that evaluation is the trial's value (the
    zoo's objective returns the last evaluation). The periodic evaluations of ``--n-evaluations`` still report to
    Optuna's pruner. A budget in seconds, not in steps, compares settings that change the speed of training (the
    updates per transition, the batch size) at what a run of that length gives.

    :param train_seconds: seconds of training, > 0
    """

    def __init__(self, *args: Any, train_seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.train_seconds = check_nonnegative("--trial-seconds", train_seconds)
        if self.train_seconds == 0:
            raise ValueError("Invalid --trial-seconds=0: expected a number of seconds > 0")
        self._started = 0.0
        self._evaluating = 0.0  # seconds spent in this callback's evaluations

    def _on_training_start(self) -> None:
        self._started = time.perf_counter()

    def _on_step(self) -> bool:
        if time.perf_counter() - self._started - self._evaluating >= self.train_seconds:
            period, self.eval_freq = self.eval_freq, self.n_calls  # the parents evaluate when n_calls % eval_freq == 0
            try:
                super()._on_step()
            finally:
                self.eval_freq = period
            return False
        start, evaluations = time.perf_counter(), self.eval_idx
        go_on = super()._on_step()
        if self.eval_idx != evaluations:
            self._evaluating += time.perf_counter() - start
        return go_on


class _ContinuedRun:
    """A loaded model as :meth:`ExperimentManager.learn` sees it in continued training: its ``learn`` continues the
    step count (``reset_num_timesteps=False``); everything else is the model's. The zoo's ``learn`` passes no such
    argument, so the model is handed to it behind this view rather than copying that method here."""

    def __init__(self, model: BaseAlgorithm) -> None:
        self._model = model

    def learn(self, total_timesteps: int, **kwargs: Any) -> BaseAlgorithm:
        return self._model.learn(total_timesteps, reset_num_timesteps=False, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class _PettingZooPools:
    """The ``vec_env_class`` the zoo's ``create_envs`` hands SB3's ``make_vec_env`` for a PettingZoo env: it ignores
    the env makers it is given (a gymnasium env per slot cannot be built) and returns a pool of ``len(env_fns)``
    copies of the env instead (:func:`~sb3_async.zoo.pettingzoo_envs.make_pettingzoo_vec_env`)."""

    def __init__(
        self,
        pettingzoo_id: str,
        env_kwargs: dict[str, Any],
        wrapper_class: Any,
        vec_env_class: type[VecEnv],
        opponent: Any = None,
    ) -> None:
        self.pettingzoo_id = pettingzoo_id
        self.env_kwargs = env_kwargs
        self.wrapper_class = wrapper_class
        self.vec_env_class = vec_env_class
        self.opponent = opponent

    def __call__(self, env_fns: list[Any], **vec_env_kwargs: Any) -> VecEnv:
        return make_pettingzoo_vec_env(
            self.pettingzoo_id,
            n_envs=len(env_fns),
            wrapper_class=self.wrapper_class,
            env_kwargs=self.env_kwargs,
            vec_env_cls=self.vec_env_class,
            vec_env_kwargs=vec_env_kwargs,
            opponent=self.opponent,
        )


class ZooExperimentManager(ExperimentManager):
    """The zoo's ``ExperimentManager``, plus:

    - for our algorithms, ``--save-freq`` checkpoints also save the replay buffer (with ``--save-replay-buffer``) and
      the ``VecNormalize`` statistics (with ``normalize``), so that ``-i <checkpoint>`` resumes with them
      (:meth:`~sb3_async.zoo.ZooAlgorithm.load`); the zoo itself saves those only at the end of training;
    - for our algorithms, continued training (``-i``) continues the step count (``learn(reset_num_timesteps=False)``):
      ``-n N`` trains ``N`` more steps, and the schedules, logs and checkpoint names go on from the saved count;
    - for an env id :func:`~sb3_async.zoo.pettingzoo_envs` registered (any algorithm): the envs are pools of the
      PettingZoo env's copies, one slot per agent; the evaluation env takes the YAML's ``env_kwargs`` unless
      ``--eval-env-kwargs`` is given; ``--eval-freq`` and ``--save-freq`` count the steps of all the slots;
    - for a turn-based PettingZoo game, the hyperparameter ``opponent`` (YAML or ``--hyperparams``) chooses who plays
      the other seats of the training games (:func:`zoo_opponent`); the evaluation games play a random legal player.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The PettingZoo env's id, None for a gymnasium env.
        self.pettingzoo_id = registered_pettingzoo_id(self.env_name.gym_id)
        #: The training games' ``opponent`` (the hyperparameter), None for the default
        self.opponent: Any = None

    def _preprocess_hyperparams(self, hyperparams: dict[str, Any]) -> Any:
        """The zoo's, less ``opponent``, which is the training envs' (not an argument of the algorithm)."""
        if "opponent" in hyperparams:
            hyperparams = dict(hyperparams)
            self.opponent = zoo_opponent(hyperparams.pop("opponent"), self.pettingzoo_id)
        return super()._preprocess_hyperparams(hyperparams)

    def create_envs(self, n_envs: int, eval_env: bool = False, no_log: bool = False) -> VecEnv:
        """The zoo's envs; for a PettingZoo env, its copies in a pool (wrapped as the zoo wraps any VecEnv)."""
        if self.pettingzoo_id is None:
            return super().create_envs(n_envs, eval_env, no_log)
        # The zoo builds the VecEnv as `make_vec_env(..., vec_env_cls=self.vec_env_class)`: the pool factory stands in
        # for the class during this one call (the env kwargs differ between training and evaluation envs).
        vec_env_class = self.vec_env_class
        env_kwargs = self.eval_env_kwargs if eval_env else self.env_kwargs
        opponent = None if eval_env else self.opponent
        pools = _PettingZooPools(self.pettingzoo_id, env_kwargs, self.env_wrapper, cast(type[VecEnv], vec_env_class), opponent)
        self.vec_env_class = pools  # type: ignore[assignment]
        try:
            return super().create_envs(n_envs, eval_env, no_log)
        finally:
            self.vec_env_class = vec_env_class

    def create_callbacks(self) -> None:
        """The zoo's callbacks, with the checkpoint and step-count changes of the class docstring."""
        if self.pettingzoo_id is not None and self._eval_env_kwargs_args is None:
            self.eval_env_kwargs = self.env_kwargs  # the YAML's env_kwargs (continuous_actions...) for the eval env too
        super().create_callbacks()
        agents = env_agents(self.pettingzoo_id, self.env_kwargs) if self.pettingzoo_id is not None else 1
        ours = zoo_algorithm(self.algo) is not None
        for callback in self.callbacks:
            if isinstance(callback, CheckpointCallback):
                callback.save_freq = max(callback.save_freq // agents, 1)
                if ours:
                    callback.save_replay_buffer = bool(self.save_replay_buffer)
                    callback.save_vecnormalize = bool(self.normalize)
            elif isinstance(callback, EvalCallback):
                callback.eval_freq = max(callback.eval_freq // agents, 1)
                if ours and masking_supported(callback.eval_env) and not isinstance(callback, MaskableEvalCallback):
                    # an env with action masks is evaluated with them (sb3-contrib's callback, the same arguments)
                    callback.__class__ = MaskableEvalCallback
                    cast(MaskableEvalCallback, callback).use_masking = True

    def learn(self, model: BaseAlgorithm) -> None:
        """The zoo's ``learn``; continued training of our algorithms goes on from the saved step count."""
        if self.continue_training and zoo_algorithm(self.algo) is not None:
            model = cast(BaseAlgorithm, _ContinuedRun(model))
        super().learn(model)
