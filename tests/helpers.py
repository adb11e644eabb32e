"""What several test files share (fixtures live in tests/conftest.py): envs that fail, leak watches, the zoo's recipes.

Test files import from here, never from one another. The classes and functions of this module travel to workers and
env hosts by value (cloudpickle), so those never import it (nor torch through it).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async.env_pool import AsyncEnvPool, EnvError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Ape-X settings that start learning at once, for tests of the machinery rather than of learning.
FAST_DQN = dict(n_actors=2, learning_starts=64, batch_size=32, block_size=10, seed=0)
FAST_DPG = dict(n_actors=2, learning_starts=64, batch_size=32, block_size=10, seed=0, policy_kwargs=dict(net_arch=[32, 32]))

#: Every algorithm of the library, by name, for tests of the SB3 contract that each must keep.
ALGORITHM_NAMES = ("A3C", "AsyncOneStepQ", "AsyncSarsa", "AsyncNStepQ", "ApeXDQN", "ApeXDPG", "AEDDPG")


def small_model(name: str, env: Any = None, policy: str = "MlpPolicy", **kwargs: Any) -> Any:
    """A small, fast model of algorithm ``name`` (CartPole-v1 or Pendulum-v1 unless ``env`` is given): tiny networks,
    learning from the first steps, two workers (AEDDPG: two envs stepped in this process)."""
    import sb3_async

    algo = getattr(sb3_async, name)
    if name == "AEDDPG":
        settings: dict[str, Any] = dict(
            n_envs=2, pool_kwargs=dict(n_hosts=0), learning_starts=40, batch_size=16, buffer_size=500, seed=0,
            policy_kwargs=dict(net_arch=dict(pi=[16], qf=[16])),
        )  # fmt: skip
    elif name == "ApeXDQN":
        settings = dict(FAST_DQN)
    elif name == "ApeXDPG":
        settings = dict(FAST_DPG)
    else:
        settings = dict(n_workers=2, seed=0, policy_kwargs=dict(net_arch=[16]))
    continuous = name in ("ApeXDPG", "AEDDPG")
    return algo(policy, env or ("Pendulum-v1" if continuous else "CartPole-v1"), **{**settings, **kwargs})


class FailingEnv(gym.Wrapper):
    """An env (CartPole-v1 unless given) that fails in its ``fail_at``-th step: raises ``RuntimeError("boom in
    step")`` (``how="raise"``) or kills its own process with SIGKILL (``how="kill"``). ``pid()`` says where it runs."""

    def __init__(self, env: gym.Env | None = None, fail_at: int = 50, how: str = "raise"):
        super().__init__(gym.make("CartPole-v1") if env is None else env)
        self.fail_at, self.how, self.count = fail_at, how, 0

    def step(self, action):
        self.count += 1
        if self.count == self.fail_at:
            if self.how == "raise":
                raise RuntimeError("boom in step")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)

    def pid(self) -> int:
        return os.getpid()


class NaNObservationEnv(gym.Wrapper):
    """An env (CartPole-v1 unless given) whose observation is all NaN from its ``nan_at``-th step on (0: from its
    first reset)."""

    def __init__(self, env: gym.Env | None = None, nan_at: int = 5):
        super().__init__(gym.make("CartPole-v1") if env is None else env)
        self.nan_at, self.count = nan_at, 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._spoiled(obs), info

    def step(self, action):
        self.count += 1
        obs, *rest = self.env.step(action)
        return self._spoiled(obs), *rest

    def _spoiled(self, obs):
        return obs * float("nan") if self.count >= self.nan_at else obs


def in_process_context(conn: Any, shared: dict[str, Any] | None = None, total_timesteps: int = 10**9) -> Any:
    """The ``WorkerContext`` of a single worker of rank 0, as the runtime builds it in a worker process, here in this
    process (``conn``: the worker's end of a pipe the test keeps the other end of)."""
    from sb3_async.runtime import WorkerContext

    return WorkerContext(
        rank=0,
        name="test",
        n_workers=1,
        base_seed=0,
        steps=torch.zeros(1, dtype=torch.int64),
        control=torch.zeros(2, dtype=torch.int64),
        parked=torch.zeros(1, dtype=torch.int64),
        conn=conn,
        shared={} if shared is None else shared,
        start_timesteps=0,
        total_timesteps=total_timesteps,
    )


def check_env_1_error_spares_the_others(pool: AsyncEnvPool) -> None:
    """Envs 0..2 of ``pool``, env 1 raising in its second step: its error names it and the others' results are kept
    (both engines, tests/env_pool/test_ray_env_pool.py too)."""
    pool.reset(seed=0)
    pool.step({0: 0, 1: 0, 2: 0})
    pool.send({0: 0, 1: 0, 2: 0})
    with pytest.raises(EnvError, match="(?s)Env 1 of the AsyncEnvPool raised in step.*boom in step") as info:
        pool.recv(min_ready=3)
    assert info.value.env_id == 1
    obs, *_ = pool.recv(min_ready=2)  # the others' results are kept
    assert sorted(obs) == [0, 2]


class ShmWatch:
    """The ``/dev/shm`` entries of *our* processes, so that another program using shared memory beside the tests
    cannot fail them: names our processes had mapped or open while :meth:`sample` looked, plus torch's segments named
    after one of our pids (``torch_<pid>_...``). :meth:`leaked` lists those still present."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.names: set[str] = set()

    def sample(self, pids: list[int]) -> None:
        for pid in pids:
            self.pids.add(pid)
            paths: list[str] = []
            try:
                paths += [line.split(None, 5)[-1] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()]
                paths += [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
            except OSError:
                continue
            self.names.update(
                path[len("/dev/shm/") :].removesuffix(" (deleted)") for path in paths if path.startswith("/dev/shm/")
            )

    def sample_self_and_children(self) -> None:
        import psutil

        self.sample([os.getpid(), *(child.pid for child in psutil.Process().children(recursive=True))])

    def leaked(self) -> set[str]:
        entries = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        ours = {name for name in entries if name.startswith("torch_") and name.split("_")[1] in map(str, self.pids)}
        return ours | (entries & self.names)


def live_children() -> list[int]:
    """Worker processes of this process still running (the forkserver itself stays, as in any program using it)."""
    return [p.pid for p in multiprocessing.active_children() if p.name.startswith("sb3_async")]


def zoo_build(
    algo: str, env_id: str, log_dir: str | Path, hyperparams: dict[str, Any] | None = None, seed: int = 0, **kwargs: Any
) -> Any:
    """The model the zoo's train() would build, untrained: the RL Zoo's ``ExperimentManager`` with our registration and
    ``zoo_configs/<algo>.yml`` (``config=`` overrides it); ``kwargs`` go to the manager."""
    from sb3_async import zoo
    from sb3_async.zoo import ZooExperimentManager as ExperimentManager  # the one train() builds

    zoo.register()
    entry = zoo.zoo_algorithm(algo)
    assert entry is not None, algo
    kwargs.setdefault("config", str(entry.config_path))
    with zoo.pettingzoo_envs(["--env", env_id]):  # a PettingZoo id, as the CLI takes it (none for gymnasium ids)
        manager = ExperimentManager(
            argparse.Namespace(),
            algo,
            env_id,
            str(log_dir),
            n_timesteps=0,
            eval_freq=-1,
            hyperparams=hyperparams,
            seed=seed,
            **kwargs,
        )
        result = manager.setup_experiment()
    assert result is not None
    return result[0]


def zoo_model(algo: str, env_id: str, log_dir: str | Path, seed: int = 0, **hyperparams: Any) -> Any:
    """The model of zoo_configs/<algo>.yml's ``env_id`` entry, built as ``python -m sb3_async.train`` builds it
    (:mod:`sb3_async.zoo` turns the entry's ``n_envs`` into worker counts). ``hyperparams`` override the entry's
    values (``n_actors``, ``n_envs_per_actor``...); the zoo's logs go to ``log_dir``."""
    return zoo_build(algo, env_id, log_dir, hyperparams or None, seed=seed, save_freq=-1, verbose=0)


class _StopAndKeepEvaluated(StopTrainingOnRewardThreshold):
    """SB3's ``StopTrainingOnRewardThreshold`` that also keeps a copy of the policy's parameters as just evaluated."""

    evaluated: dict[str, torch.Tensor]

    def _on_step(self) -> bool:
        self.evaluated = {name: value.detach().clone() for name, value in self.model.policy.state_dict().items()}
        return super()._on_step()


def learns_and_returns_the_evaluated_model(model, env_id: str, threshold: float, total: int, every: int, margin: float):
    """SB3's ``EvalCallback`` (20 deterministic episodes, workers parked: the evaluated policy is the one that stops
    training) with ``StopTrainingOnRewardThreshold``: ``learn()`` must stop on the threshold and return the parameters
    that evaluation saw (no update after it), and that model must score within ``margin`` of the threshold
    on 20 fresh deterministic episodes (other seeds than the evaluations'). A mean just above the threshold can spread
    on fresh episodes: with 10-episode evaluations, a CartPole stop at 476.3 +- 38.9 scored 399.3 on fresh ones (CI,
    the Ray test); 20 make a lucky draw less likely. The first evaluation past the threshold is also the luckiest of
    the draws so far: a policy whose episodes spread widely (a Pendulum stop at -183.6 +- 160.8 scored -260.6 on fresh
    ones, CI, Ape-X DPG) can miss ``margin`` by chance alone. So the fresh mean may also fall short by up to three
    standard errors of the difference of two 20-episode means of that policy, whichever allowance is larger."""
    stop = _StopAndKeepEvaluated(threshold)
    eval_callback = EvalCallback(
        gym.make(env_id), eval_freq=every // model.n_envs, n_eval_episodes=20, callback_on_new_best=stop
    )
    start = time.perf_counter()
    model.learn(total, callback=eval_callback)
    seconds = time.perf_counter() - start
    assert eval_callback.last_mean_reward >= threshold, (eval_callback.last_mean_reward, model.num_timesteps, seconds)
    # No update after the evaluation (a step moves parameters by ~1e-3); atol: the Ray backend's final additive merge
    # (driver += host - base, in float32) can leave ~1e-9 of rounding where nothing changed
    torch.testing.assert_close(model.policy.state_dict(), stop.evaluated, rtol=0.0, atol=1e-6)
    env = gym.make(env_id)
    env.reset(seed=12345)
    returns, _ = evaluate_policy(model, env, n_eval_episodes=20, deterministic=True, warn=False, return_episode_rewards=True)
    final = float(np.mean(returns))
    allowance = max(margin, 3.0 * float(np.std(returns, ddof=1)) * np.sqrt(2 / len(returns)))
    print(
        f"{type(model).__name__} {env_id}: stopped at {model.num_timesteps} steps, {seconds:.0f} s; returned model"
        f" {final:.1f} +- {np.std(returns, ddof=1):.1f} (allowed down to {threshold - allowance:.1f})"
    )
    assert final >= threshold - allowance, (final, allowance)
