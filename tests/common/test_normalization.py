"""Running normalization shared by the workers (sb3_async.common.normalization): statistics equal those of one
VecNormalize fed the union of the workers' data, frozen outside the workers, saved and loaded with the model."""

from __future__ import annotations

import copy
import os
import pickle
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize, sync_envs_normalization

from sb3_async import A3C
from sb3_async.common.normalization import (
    SharedRunningMeanStd,
    attach_statistics,
    merge_moments,
    share_running_mean_std,
    share_statistics,
)
from sb3_async.runtime.seqlock import read_rows, seqlock_groups, write_rows


def test_merge_moments_hand_computed() -> None:
    # {1, 2, 3}: n 3, mean 2, var 2/3; {4, 5}: n 2, mean 4.5, var 1/4; union {1..5}: mean 3, var 2
    mean, var, count = merge_moments(np.array([3.0, 2.0]), np.array([[2.0], [4.5]]), np.array([[2 / 3], [0.25]]))
    assert count == 5.0
    np.testing.assert_allclose(mean, [3.0])
    np.testing.assert_allclose(var, [2.0])
    # an empty slot counts for nothing
    mean, var, count = merge_moments(np.array([3.0, 0.0]), np.array([[2.0], [7.0]]), np.array([[2 / 3], [1.0]]))
    assert (count, float(mean[0]), float(var[0])) == (3.0, 2.0, pytest.approx(2 / 3))
    with pytest.raises(ValueError, match="Shapes"):
        merge_moments(np.array([1.0]), np.zeros((2, 3)), np.zeros((2, 3)))


def test_slots_merge_to_the_union_of_batches() -> None:
    rng = np.random.default_rng(0)
    reference = RunningMeanStd(shape=(3,))
    tensors = share_running_mean_std(RunningMeanStd(shape=(3,)), n_writers=2)
    writers = [SharedRunningMeanStd(tensors, slot) for slot in (1, 2)]
    reader = SharedRunningMeanStd(tensors)
    for i in range(20):
        batch = rng.normal(loc=i % 5, scale=1 + i, size=(4, 3))
        writers[i % 2].update(batch)
        reference.update(batch)
    np.testing.assert_allclose(reader.mean, reference.mean, rtol=1e-10)
    np.testing.assert_allclose(reader.var, reference.var, rtol=1e-10)
    assert reader.count == pytest.approx(reference.count)
    # a writer re-reads every slot at each of its own updates: the last one sees the other's data too
    np.testing.assert_allclose(writers[1].mean, reference.mean, rtol=1e-10)
    with pytest.raises(RuntimeError, match="only reads"):
        reader.update(np.zeros((1, 3)))
    # pickled and deep-copied as SB3's own class, frozen
    for copied in (pickle.loads(pickle.dumps(reader)), copy.deepcopy(reader)):
        assert type(copied) is RunningMeanStd
        np.testing.assert_allclose(copied.mean, reference.mean, rtol=1e-10)
    frozen = copy.deepcopy(reader)
    writers[0].update(np.full((2, 3), 100.0))
    assert not np.allclose(reader.mean, frozen.mean)


def test_seqlock_rows_copy_between_machines_never_torn() -> None:
    """What backend="ray" does with the statistics (WorkerSpec.owned): copy a writer's rows consistently from one
    machine's tensors to another's; a reader waits out a row being written (odd version) instead of reading it."""
    rng = np.random.default_rng(1)
    here = share_running_mean_std(RunningMeanStd(shape=(2,)), n_writers=3)
    there = share_running_mean_std(RunningMeanStd(shape=(2,)), n_writers=3)
    [group] = seqlock_groups({"obs_rms": here})
    nested = seqlock_groups([{"a": {"b": there}}, 3])
    assert group is here and len(nested) == 1 and nested[0] is there
    SharedRunningMeanStd(here, slot=2).update(rng.normal(size=(5, 2)))  # worker 1 runs here
    SharedRunningMeanStd(there, slot=3).update(rng.normal(size=(7, 2)))  # worker 2 runs there
    rows = np.array([2])
    write_rows(there, rows, read_rows(here, rows))  # here -> there: the row of worker 1
    write_rows(here, np.array([3]), read_rows(there, np.array([3])))  # and back: worker 2's
    for name in ("counts", "means", "vars"):
        np.testing.assert_array_equal(here[name].numpy(), there[name].numpy())  # one writer per row: equal copies
    assert SharedRunningMeanStd(there).count == pytest.approx(12 + 1e-4)
    assert (here["versions"].numpy() % 2 == 0).all() and (there["versions"].numpy() % 2 == 0).all()

    here["versions"][1] += 1  # a writer mid-update of row 1

    def finish() -> None:
        time.sleep(0.05)
        here["means"][1] = torch.tensor([5.0, 6.0], dtype=torch.float64)
        here["versions"][1] += 1

    thread = threading.Thread(target=finish)
    thread.start()
    copy_ = read_rows(here, np.array([1]))
    thread.join()
    np.testing.assert_array_equal(copy_["means"], [[5.0, 6.0]])  # the finished row, never the half-written one


def _pendulum_envs(n: int, seed: int) -> DummyVecEnv:
    venv = DummyVecEnv([lambda: gym.make("Pendulum-v1") for _ in range(n)])
    venv.seed(seed)
    return venv


def test_shared_vec_normalize_equals_one_vec_normalize_of_all_envs() -> None:
    """Two VecNormalize copies on shared statistics (two workers' envs) against one VecNormalize of all the envs,
    fed the same observations and rewards: same obs_rms and ret_rms (reward scaling's returns stay per env)."""
    options = dict(gamma=0.9, clip_obs=5.0)
    single = VecNormalize(_pendulum_envs(4, seed=0), **options)
    template = VecNormalize(_pendulum_envs(1, seed=0), **options)
    shared = share_statistics(template, n_writers=2)
    workers = []
    for rank in range(2):
        worker = VecNormalize(_pendulum_envs(2, seed=2 * rank), **options)
        attach_statistics(worker, shared, slot=rank + 1)
        workers.append(worker)
    single.reset()
    for worker in workers:
        worker.reset()
    actions = np.random.default_rng(1).uniform(-2, 2, size=(250, 4, 1)).astype(np.float32)
    for step_actions in actions:  # 250 steps: past Pendulum's 200-step time limit, so returns are reset too
        single.step(step_actions)
        workers[0].step(step_actions[:2])
        workers[1].step(step_actions[2:])
    attach_statistics(template, shared, slot=None)
    for name in ("obs_rms", "ret_rms"):
        merged, reference = getattr(template, name), getattr(single, name)
        np.testing.assert_allclose(merged.mean, reference.mean, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(merged.var, reference.var, rtol=1e-6)
        assert merged.count == pytest.approx(reference.count)
    # normalization itself is VecNormalize's: the same statistics give the same normalized observation
    obs = np.array([[0.5, -0.5, 3.0]], dtype=np.float32)
    single.obs_rms = copy.deepcopy(template.obs_rms)
    np.testing.assert_array_equal(template.normalize_obs(obs), single.normalize_obs(obs))


class RecordObs(gym.Wrapper):
    """In the workers' copies: appends every observation a VecNormalize around it will see (reset ones, and step
    ones that do not end an episode: the VecEnv replaces those by the reset one) to a file of its own."""

    def __init__(self, env: gym.Env, folder: str):
        super().__init__(env)
        self.folder, self.main_pid = folder, os.getpid()

    def _record(self, obs: np.ndarray) -> None:
        if os.getpid() == self.main_pid:
            return
        with open(os.path.join(self.folder, f"{os.getpid()}-{id(self)}.txt"), "a") as file:
            file.write(" ".join(repr(float(x)) for x in obs) + "\n")

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._record(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            self._record(obs)
        return obs, reward, terminated, truncated, info


def _recorded(folder: Path) -> np.ndarray:
    rows = [line.split() for path in folder.glob("*.txt") for line in path.read_text().splitlines()]
    return np.array(rows, dtype=np.float64)


def test_workers_share_statistics_frozen_outside_them_and_saved_with_the_model(tmp_path: Path) -> None:
    """Through A3C's workers (gSDE, GAE λ 0.9, the zoo's Pendulum recipe): the model's statistics equal those of one
    RunningMeanStd fed every observation the workers' envs produced; evaluation and the main process never change
    them; save/load and vecnormalize.pkl round-trip them exactly; training continues from them."""
    record = tmp_path / "obs"
    record.mkdir()
    folder = str(record)
    template = VecNormalize(DummyVecEnv([lambda: RecordObs(gym.make("Pendulum-v1"), folder)]), gamma=0.9)
    model = A3C(
        "MlpPolicy",
        template,
        n_workers=2,
        n_envs_per_worker=2,
        n_steps=8,
        gae_lambda=0.9,
        gamma=0.9,
        use_sde=True,
        policy_kwargs=dict(log_std_init=-2.0, ortho_init=False),
        seed=0,
    )
    model.learn(2000)
    venv = model.get_vec_normalize_env()
    assert venv is template and type(venv.obs_rms) is RunningMeanStd  # plain snapshots outside learn()
    reference = RunningMeanStd(shape=(3,))
    reference.update(_recorded(record))
    np.testing.assert_allclose(venv.obs_rms.mean, reference.mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(venv.obs_rms.var, reference.var, rtol=1e-6)
    # every step of every worker env, plus each worker env's first reset, and nothing from the main process
    assert venv.obs_rms.count == pytest.approx(1e-4 + model.num_timesteps + 4)
    assert venv.ret_rms.count == pytest.approx(1e-4 + model.num_timesteps)

    # frozen in evaluation: an eval env gets a copy, evaluating changes nothing
    eval_env = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), training=False, norm_reward=False)
    sync_envs_normalization(model.get_env(), eval_env)
    before = copy.deepcopy(venv.obs_rms)
    evaluate_policy(model, eval_env, n_eval_episodes=1)
    assert type(eval_env.obs_rms) is RunningMeanStd
    np.testing.assert_array_equal(venv.obs_rms.mean, before.mean)
    np.testing.assert_array_equal(eval_env.obs_rms.mean, before.mean)

    # saved with the model; vecnormalize.pkl as the zoo writes it loads into SB3's own VecNormalize
    model.save(tmp_path / "model.zip")
    venv.save(str(tmp_path / "vecnormalize.pkl"))
    loaded = A3C.load(tmp_path / "model.zip")
    loaded_venv = loaded.get_vec_normalize_env()
    assert isinstance(loaded_venv, VecNormalize) and loaded_venv.gamma == 0.9
    for name in ("mean", "var", "count"):
        np.testing.assert_array_equal(getattr(loaded_venv.obs_rms, name), getattr(venv.obs_rms, name))
        np.testing.assert_array_equal(getattr(loaded_venv.ret_rms, name), getattr(venv.ret_rms, name))
    from_pkl = VecNormalize.load(str(tmp_path / "vecnormalize.pkl"), DummyVecEnv([lambda: gym.make("Pendulum-v1")]))
    assert type(from_pkl.obs_rms) is RunningMeanStd
    np.testing.assert_array_equal(from_pkl.obs_rms.mean, venv.obs_rms.mean)
    obs = np.array([[0.1, 0.9, -1.0]], dtype=np.float32)
    np.testing.assert_array_equal(
        loaded.predict(loaded_venv.normalize_obs(obs), deterministic=True)[0],
        model.predict(venv.normalize_obs(obs), deterministic=True)[0],
    )
    # training continues from the saved statistics
    saved_count = loaded_venv.obs_rms.count
    loaded.learn(500, reset_num_timesteps=False)
    assert loaded.get_vec_normalize_env().obs_rms.count > saved_count


def test_eval_callback_gets_frozen_copies(tmp_path: Path) -> None:
    from stable_baselines3.common.callbacks import EvalCallback

    eval_env = VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")]), training=False, norm_reward=False)
    model = A3C("MlpPolicy", VecNormalize(DummyVecEnv([lambda: gym.make("Pendulum-v1")])), n_workers=2, seed=0)
    callback = EvalCallback(eval_env, eval_freq=400, n_eval_episodes=1, warn=True)
    model.learn(1200, callback=callback)
    assert callback.best_mean_reward > -np.inf  # it evaluated, on statistics synced from the workers'
    assert type(eval_env.obs_rms) is RunningMeanStd and eval_env.obs_rms.count > 1
    assert eval_env.obs_rms.count <= model.get_vec_normalize_env().obs_rms.count


@pytest.mark.slow
@pytest.mark.timeout(1800)  # up to 1M steps: ~10 min on 2 busy cores
def test_a3c_learns_pendulum_with_its_zoo_config(tmp_path: Path) -> None:
    """The zoo's A2C recipe ported to A3C (zoo_configs/a3c.yml, normalize + GAE + gSDE) reaches a -200 deterministic
    evaluation on Pendulum-v1 within its 1M steps (the benchmark's `pendulum` suite measures the time)."""
    import argparse

    from rl_zoo3.exp_manager import ExperimentManager
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

    from sb3_async import zoo

    zoo.register()
    entry = zoo.zoo_algorithm("a3c")
    assert entry is not None
    manager = ExperimentManager(
        argparse.Namespace(),
        "a3c",
        "Pendulum-v1",
        str(tmp_path),
        n_timesteps=0,
        eval_freq=-1,
        seed=0,
        config=str(entry.config_path),
    )
    result = manager.setup_experiment()
    assert result is not None
    model = result[0]
    eval_env = manager.create_envs(1, eval_env=True)  # VecNormalize(training=False), synced by EvalCallback
    callback = EvalCallback(
        eval_env,
        eval_freq=20_000 // model.n_envs,
        n_eval_episodes=10,
        callback_on_new_best=StopTrainingOnRewardThreshold(-200.0),
    )
    model.learn(1_000_000, callback=callback)
    assert callback.best_mean_reward >= -200.0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(gae_lambda=1.5), ValueError, "gae_lambda"),
        (dict(use_sde="yes"), TypeError, "use_sde"),
        (dict(sde_sample_freq=-2), ValueError, "sde_sample_freq"),
        (dict(use_sde=True, policy="SoftplusMlpPolicy"), ValueError, "use_sde"),
        (dict(use_rms_prop=True), TypeError, "use_rms_prop"),  # the zoo's A2C key: A3C's optimizer is `optimizer`
    ],
)
def test_a3c_continuous_control_arguments_are_checked(kwargs: dict, error: type, match: str) -> None:
    arguments = dict(policy="MlpPolicy", env="Pendulum-v1", n_workers=1) | kwargs
    with pytest.raises(error, match=match):
        A3C(**arguments)
