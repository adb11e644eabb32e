"""SB3's ``EvalCallback`` inside ``learn()`` evaluates a frozen policy (``sb3_async.common.callbacks``)."""

import hashlib
import time

import numpy as np
import pytest
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    EvalCallback,
    EveryNTimesteps,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async import A3C, ApeXDQN, AsyncNStepQ
from sb3_async.common.callbacks import frozen_evaluations, iter_callbacks

EVAL_SEED = 123


def parameters_hash(model) -> str:
    """Hash of every parameter of the policy (the shared tensors the workers write during ``learn()``)."""
    digest = hashlib.sha256()
    for param in model.policy.parameters():
        digest.update(param.detach().numpy().tobytes())
    return digest.hexdigest()


class HashingEval(EvalCallback):
    """An ``EvalCallback`` that records, for each of its evaluations, the parameters' hash before and after it, the
    workers' step count before and after it, and its score. The eval env is reseeded before every evaluation, so a
    score can be reproduced later.

    :param wait_for_workers: inside each evaluation, wait until the workers have stepped (at most 30 s): what they do
        when they are not parked
    """

    def __init__(self, *args, wait_for_workers: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.wait_for_workers = wait_for_workers
        self.records: list[dict] = []

    def _on_step(self) -> bool:
        if not (self.eval_freq > 0 and self.n_calls % self.eval_freq == 0):
            return super()._on_step()
        runtime = self.model._runtime
        before, steps_before = parameters_hash(self.model), runtime.steps()
        if self.wait_for_workers:
            deadline = time.monotonic() + 30.0
            while runtime.steps() == steps_before and time.monotonic() < deadline:
                time.sleep(0.01)
        else:
            time.sleep(0.1)  # room for workers that were not parked to move
        self.eval_env.seed(EVAL_SEED)
        continue_training = super()._on_step()
        self.records.append(
            dict(
                before=before,
                after=parameters_hash(self.model),
                steps_before=steps_before,
                steps_after=runtime.steps(),
                mean=self.last_mean_reward,
            )
        )
        return continue_training


class _Noop(BaseCallback):
    def _on_step(self) -> bool:
        return True


def eval_env():
    return make_vec_env("CartPole-v1", n_envs=1, seed=EVAL_SEED)


MODELS = {
    "async_n_step_q": lambda: AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0),
    "a3c": lambda: A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0),
    # Ape-X: the learner runs in the main process between callbacks, the actors are parked during evaluations
    "apex_dqn": lambda: ApeXDQN(
        "MlpPolicy", "CartPole-v1", n_actors=2, n_envs_per_actor=2, learning_starts=64, batch_size=32, block_size=10, seed=0
    ),
}


@pytest.mark.parametrize("algo", list(MODELS))
def test_evaluations_see_frozen_parameters_and_best_model_reproduces(tmp_path, algo):
    model = MODELS[algo]()
    model_class = type(model)
    callback = HashingEval(eval_env(), eval_freq=500, n_eval_episodes=3, best_model_save_path=str(tmp_path))
    model.learn(6000, callback=callback)

    records = callback.records
    assert len(records) >= 3
    for record in records:  # nothing moved while an evaluation ran
        assert record["before"] == record["after"]
        assert record["steps_before"] == record["steps_after"]
    for previous, current in zip(records, records[1:]):  # training went on between evaluations
        assert current["steps_before"] > previous["steps_after"]
        assert current["before"] != previous["after"]
    assert "_on_step" not in vars(callback)  # the wrapper is gone after learn()

    best = int(np.argmax([record["mean"] for record in records]))  # the first best, as EvalCallback saves it
    loaded = model_class.load(tmp_path / "best_model.zip")
    assert parameters_hash(loaded) == records[best]["before"]  # exactly the evaluated parameters
    env = eval_env()
    env.seed(EVAL_SEED)
    mean, _ = evaluate_policy(loaded, env, n_eval_episodes=3, deterministic=True)
    assert mean == callback.best_mean_reward == records[best]["mean"]


def test_threshold_stop_inside_chain_returns_the_evaluated_model():
    """An EvalCallback inside EveryNTimesteps inside a CallbackList, stopping at a reward threshold: ``learn()``
    returns exactly the parameters of the evaluation that stopped it (no update after it)."""
    model = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=1)
    stop = StopTrainingOnRewardThreshold(reward_threshold=0.0)  # any score stops training at the first evaluation
    evaluation = HashingEval(eval_env(), eval_freq=1, n_eval_episodes=2, callback_on_new_best=stop)
    model.learn(1_000_000, callback=CallbackList([_Noop(), EveryNTimesteps(2000, evaluation)]))
    assert len(evaluation.records) == 1
    record = evaluation.records[0]
    assert record["before"] == record["after"] == parameters_hash(model)
    assert model.num_timesteps < 1_000_000


class _StopAfterEvaluations(BaseCallback):
    def __init__(self, evaluation: HashingEval, n: int):
        super().__init__()
        self.evaluation, self.n = evaluation, n

    def _on_step(self) -> bool:
        return len(self.evaluation.records) < self.n


def test_opt_out_lets_workers_train_during_evaluations():
    model = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0, pause_for_eval=False)
    evaluation = HashingEval(eval_env(), eval_freq=250, n_eval_episodes=2, wait_for_workers=True)
    stop = _StopAfterEvaluations(evaluation, 3)  # stops well before the budget: the workers are live at every evaluation
    model.learn(1_000_000, callback=CallbackList([evaluation, stop]))
    assert len(evaluation.records) == 3
    for record in evaluation.records:
        assert record["steps_after"] > record["steps_before"]
        assert record["after"] != record["before"]


def test_iter_callbacks_finds_nested_eval_callbacks():
    inner = EvalCallback(eval_env(), eval_freq=1)
    new_best = StopTrainingOnRewardThreshold(1.0)
    outer = EvalCallback(eval_env(), eval_freq=1, callback_on_new_best=new_best, callback_after_eval=EveryNTimesteps(1, inner))
    tree = CallbackList([_Noop(), outer])
    found = list(iter_callbacks(tree))
    assert [type(item) for item in found] == [
        CallbackList,
        _Noop,
        EvalCallback,
        EveryNTimesteps,
        EvalCallback,
        StopTrainingOnRewardThreshold,
    ]
    assert found[2] is outer and found[4] is inner


def test_frozen_evaluations_skips_opted_out_models_and_restores_callbacks():
    callback = EvalCallback(eval_env(), eval_freq=1)

    class Model:
        pause_for_eval = False

    with frozen_evaluations(Model(), callback):
        assert "_on_step" not in vars(callback)
    Model.pause_for_eval = True
    with frozen_evaluations(Model(), CallbackList([callback])):
        assert "_on_step" in vars(callback)
    assert "_on_step" not in vars(callback)


def test_pause_for_eval_is_checked():
    with pytest.raises(TypeError, match="pause_for_eval"):
        AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=1, pause_for_eval="yes")
