"""A3C with sb3-contrib's recurrent policies: hidden states in the worker, the loss replay, predict, save/load, the zoo
and the benchmark's ``memory`` suite. The learning check on the masked-velocity CartPole is ``slow``."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.policies import (
    RecurrentActorCriticCnnPolicy,
    RecurrentActorCriticPolicy,
    RecurrentMultiInputActorCriticPolicy,
)
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.envs import FakeImageEnv, SimpleMultiObsEnv

from sb3_async import A3C
from sb3_async.a3c.a3c import LstmCarry
from sb3_async.benchmark import registry, suites
from sb3_async.common.gradient_sharing import GradientWorker, stack_steps
from sb3_async.common.policies import A3CCnnLstmPolicy, MnihCNN
from tests.helpers import in_process_context

SMALL_LSTM = dict(lstm_hidden_size=16, net_arch=[16])


# Small LSTMs step much faster on one thread than on cores shared with the workers of other tests.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


_RECEIVERS: list[Any] = []  # the main process' ends of the in-process workers' pipes, kept open


def _in_process_worker(model: A3C) -> tuple[GradientWorker, Any]:
    """The worker of rank 0 built in this process, as the runtime builds it in a worker process."""
    model._share_state()
    spec = model._worker_specs()[0]
    receiver, conn = mp.Pipe(duplex=False)
    _RECEIVERS.append(receiver)
    return GradientWorker(in_process_context(conn, spec.shared), spec.payload), spec.payload


def _zero_states(like: RNNStates, envs: list[int]) -> RNNStates:
    """``like`` with the states of ``envs`` zeroed."""
    pi, vf = [list(s.clone() for s in part) for part in like]
    for part in (pi, vf):
        for tensor in part:
            tensor[:, envs] = 0.0
    return RNNStates(tuple(pi), tuple(vf))


@pytest.mark.parametrize("n_envs", [1, 3])
def test_loss_replay_gives_the_step_by_step_outputs(n_envs: int) -> None:
    """The worker's loss replays each segment from the state held at its start: the logits and values it computes are
    those the worker's envs were stepped with, across segments and episode starts (mid-segment included)."""
    model = A3C("MlpLstmPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=n_envs, seed=0, policy_kwargs=SMALL_LSTM)
    worker, cfg = _in_process_worker(model)
    worker.synchronize()
    policy = worker.policy
    carry = LstmCarry(policy, n_envs)
    seen_starts = seen_mid_segment_starts = 0
    for _ in range(25):
        start_states, start_episode_starts = carry.states, worker.episode_starts
        step_logits: list[torch.Tensor] = []
        step_values: list[torch.Tensor] = []

        def act(obs: Any, logits: list[torch.Tensor] = step_logits, values: list[torch.Tensor] = step_values) -> np.ndarray:
            starts = torch.as_tensor(worker.episode_starts, dtype=torch.float32)
            obs_tensor = torch.as_tensor(obs)
            with torch.no_grad():  # step-by-step inference, as predict() does it, from the worker's current states
                dist, _ = policy.get_distribution(obs_tensor, carry.states.pi, starts)
                logits.append(dist.distribution.logits)
                values.append(policy.predict_values(obs_tensor, carry.states.vf, starts).flatten())
            return carry.act(obs, worker.episode_starts)  # what the worker runs

        segment = worker.collect(act, lambda obs, envs: np.zeros(len(envs), dtype=np.float32))
        starts = np.stack([start_episode_starts, *segment.dones[:-1]])
        seen_starts += int(starts.sum())
        seen_mid_segment_starts += int(starts[1:].sum())
        actions = torch.as_tensor(stack_steps(segment.actions)).long().flatten()
        values, log_prob, entropy = carry.replay(segment, actions, start_states, start_episode_starts)
        torch.testing.assert_close(values, torch.cat(step_values), rtol=1e-5, atol=1e-6)
        # log π(a|s) for both actions: the replay's logits are the step-by-step ones (up to the softmax normalizer)
        expected = torch.log_softmax(torch.cat(step_logits), dim=-1)
        for action in (0, 1):
            _, log_prob_a, _ = carry.replay(segment, torch.full_like(actions, action), start_states, start_episode_starts)
            torch.testing.assert_close(log_prob_a, expected[:, action], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(log_prob, expected.gather(1, actions[:, None]).flatten(), rtol=1e-5, atol=1e-6)
        assert entropy is not None and entropy.shape == values.shape
        assert values.requires_grad  # the loss backpropagates through the segment (truncated BPTT)
    assert seen_starts > 1  # episodes ended inside the test (CartPole's random episodes last ~20 steps)
    if n_envs > 1:
        assert seen_mid_segment_starts > 0
    worker.close()


def test_state_is_carried_across_segments() -> None:
    """The state at the start of a segment is the one the previous segment ended with: replaying a segment from it
    continues the previous one exactly, while replaying it from zero states does not."""
    model = A3C("MlpLstmPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=2, seed=1, policy_kwargs=SMALL_LSTM)
    worker, _ = _in_process_worker(model)
    worker.synchronize()
    carry = LstmCarry(worker.policy, 2)
    checked = 0
    for _ in range(20):
        first_states, first_starts = carry.states, worker.episode_starts
        first = worker.collect(lambda obs: carry.act(obs, worker.episode_starts), lambda obs, envs: np.zeros(len(envs)))
        second_states, second_starts = carry.states, worker.episode_starts
        second = worker.collect(lambda obs: carry.act(obs, worker.episode_starts), lambda obs, envs: np.zeros(len(envs)))
        if second_starts.any():
            continue
        assert all(float(tensor.abs().sum()) > 0 for part in second_states for tensor in part)
        both = type(first)(first.obs + second.obs, first.actions + second.actions, [], first.dones + second.dones, None)
        n = len(first)
        actions = torch.as_tensor(stack_steps(both.actions)).long().flatten()
        whole, _, _ = carry.replay(both, actions, first_states, first_starts)
        carried, _, _ = carry.replay(second, actions[n * 2 :], second_states, second_starts)
        torch.testing.assert_close(carried, whole[n * 2 :], rtol=1e-5, atol=1e-6)
        from_zero, _, _ = carry.replay(second, actions[n * 2 :], _zero_states(second_states, [0, 1]), second_starts)
        assert not torch.allclose(from_zero, carried, atol=1e-4)
        checked += 1
    assert checked > 0
    worker.close()


def test_state_is_reset_at_episode_start() -> None:
    """An env whose observation starts an episode is stepped from a zero state (RecurrentPPO's ``episode_starts``); the
    others keep theirs."""
    model = A3C("MlpLstmPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=2, seed=2, policy_kwargs=SMALL_LSTM)
    policy = model.policy
    carry = LstmCarry(policy, 2)
    obs = np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32)
    for _ in range(3):
        carry.act(obs, np.zeros(2, dtype=bool))
    held = carry.states
    carry.act(obs, np.array([True, False]))
    with torch.no_grad():
        _, _, _, fresh = policy(torch.as_tensor(obs), _zero_states(held, [0, 1]), torch.zeros(2))
        _, _, _, kept = policy(torch.as_tensor(obs), held, torch.zeros(2))
    for got, zero, cont in zip([*carry.states.pi, *carry.states.vf], [*fresh.pi, *fresh.vf], [*kept.pi, *kept.vf]):
        torch.testing.assert_close(got[:, 0], zero[:, 0])
        torch.testing.assert_close(got[:, 1], cont[:, 1])
        assert not torch.allclose(zero[:, 0], cont[:, 0])


def test_bootstrap_values_use_each_env_s_own_critic_state() -> None:
    """A truncated env's bootstrap ``V(s_terminal)`` comes from that env's critic state (RecurrentPPO's), whichever
    envs are asked for."""
    model = A3C("MlpLstmPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=3, seed=3, policy_kwargs=SMALL_LSTM)
    carry = LstmCarry(model.policy, 3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        carry.act(rng.normal(size=(3, 4)).astype(np.float32), np.zeros(3, dtype=bool))
    obs = rng.normal(size=(3, 4)).astype(np.float32)
    with torch.no_grad():
        expected = model.policy.predict_values(torch.as_tensor(obs), carry.states.vf, torch.zeros(3)).flatten().numpy()
    np.testing.assert_allclose(carry.values(obs[[2]], np.array([2]), np.zeros(1, dtype=bool)), expected[[2]], rtol=1e-5)
    np.testing.assert_allclose(
        carry.values(obs[[0, 2]], np.array([0, 2]), np.zeros(2, dtype=bool)), expected[[0, 2]], rtol=1e-5
    )
    assert not np.allclose(carry.values(obs[[2]], np.array([1]), np.zeros(1, dtype=bool)), expected[[2]])


@pytest.mark.parametrize(
    ("alias", "policy_class"),
    [
        ("MlpLstmPolicy", RecurrentActorCriticPolicy),
        ("CnnLstmPolicy", A3CCnnLstmPolicy),
        ("MultiInputLstmPolicy", RecurrentMultiInputActorCriticPolicy),
    ],
)
def test_aliases_learn(alias: str, policy_class: type) -> None:
    envs = {
        "MlpLstmPolicy": lambda: gym.make("CartPole-v1", max_episode_steps=5),  # truncations: recurrent bootstraps
        "CnnLstmPolicy": lambda: FakeImageEnv(screen_height=40, screen_width=40, n_channels=1, discrete=True),
        "MultiInputLstmPolicy": lambda: SimpleMultiObsEnv(random_start=True),
    }
    model = A3C(
        alias, envs[alias], n_workers=1, n_envs_per_worker=2, seed=0, policy_kwargs=dict(lstm_hidden_size=8), backend="serial"
    )
    assert type(model.policy) is policy_class
    model.learn(200)
    assert model.num_timesteps >= 200


@pytest.mark.parametrize("algo", ["a3c", "async_one_step_q", "async_sarsa"])
def test_time_limit_bootstraps_run_in_every_gradient_sharing_worker(algo: str) -> None:
    """``collect()`` passes the truncated envs' indices to every algorithm's ``terminal_value``."""
    from sb3_async import AsyncOneStepQ, AsyncSarsa

    algo_class = {"a3c": A3C, "async_one_step_q": AsyncOneStepQ, "async_sarsa": AsyncSarsa}[algo]
    env = lambda: gym.make("CartPole-v1", max_episode_steps=3)  # noqa: E731
    model = algo_class("MlpPolicy", env, n_workers=1, n_envs_per_worker=2, backend="serial")
    model.learn(120)
    assert model.num_timesteps >= 120 and len(model.ep_info_buffer) > 0
    assert all(info["l"] <= 3 for info in model.ep_info_buffer)


def test_cnn_lstm_policy_is_the_papers_network() -> None:
    """Mnih's CNN (its 256-unit layer), 256 LSTM cells after it, the heads directly on the LSTM (§5.1)."""
    model = A3C("CnnLstmPolicy", FakeImageEnv(n_channels=1, discrete=True), n_workers=1, _init_setup_model=True)
    policy = model.policy
    assert isinstance(policy, RecurrentActorCriticCnnPolicy)
    assert isinstance(policy.features_extractor, MnihCNN) and policy.features_dim == 256
    assert policy.lstm_actor.input_size == 256 and policy.lstm_actor.hidden_size == 256
    assert policy.action_net.in_features == 256 and policy.value_net.in_features == 256


def test_predict_is_recurrent_ppos() -> None:
    """Same parameters, same observations and episode starts: the same actions and states as RecurrentPPO."""
    env = gym.make("CartPole-v1")
    model = A3C("MlpLstmPolicy", env, n_workers=1, seed=0, policy_kwargs=SMALL_LSTM)
    ppo = RecurrentPPO("MlpLstmPolicy", env, seed=0, policy_kwargs=SMALL_LSTM, n_steps=8, batch_size=8)
    ppo.policy.load_state_dict(model.policy.state_dict())
    obs = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    state = ppo_state = None
    for step in range(4):
        starts = np.array([step == 0, step == 2, False])
        action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        ppo_action, ppo_state = ppo.predict(obs, state=ppo_state, episode_start=starts, deterministic=True)
        np.testing.assert_array_equal(action, ppo_action)
        assert state is not None and ppo_state is not None
        assert [s.shape for s in state] == [s.shape for s in ppo_state] == [(1, 3, 16), (1, 3, 16)]
        for mine, theirs in zip(state, ppo_state):
            np.testing.assert_array_equal(mine, theirs)
    single, single_state = model.predict(obs[0], deterministic=True)  # one observation, no state: zeros
    assert np.shape(single) == () and [s.shape for s in single_state] == [(1, 1, 16), (1, 1, 16)]


def test_save_load_round_trip(tmp_path: Path) -> None:
    model = A3C("MlpLstmPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=2, seed=0, policy_kwargs=SMALL_LSTM)
    model.learn(300)
    model.save(tmp_path / "a3c_lstm")
    loaded = A3C.load(tmp_path / "a3c_lstm")
    assert type(loaded.policy) is RecurrentActorCriticPolicy and loaded.policy.lstm_actor.hidden_size == 16
    for key, value in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[key], value, rtol=0, atol=0)
    obs = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    state = loaded_state = None
    for step in range(3):
        starts = np.array([step == 0, False])
        action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
        loaded_action, loaded_state = loaded.predict(obs, state=loaded_state, episode_start=starts, deterministic=True)
        np.testing.assert_array_equal(action, loaded_action)
        for mine, theirs in zip(state, loaded_state):
            np.testing.assert_array_equal(mine, theirs)
    loaded.set_env(gym.make("CartPole-v1"))
    loaded.learn(100)  # training goes on from the loaded model


def test_zoo_and_benchmark_registration() -> None:
    import rl_zoo3.import_envs  # noqa: F401  (registers CartPoleNoVel-v1, as the zoo's train does)
    from rl_zoo3.wrappers import MaskVelocityWrapper

    from sb3_async import zoo

    entry = yaml.safe_load((zoo.CONFIG_DIR / "a3c.yml").read_text())["CartPoleNoVel-v1"]
    assert entry["policy"] == "MlpLstmPolicy"
    env = gym.make("CartPoleNoVel-v1")
    assert isinstance(env.env, MaskVelocityWrapper) or any(
        isinstance(wrapper, MaskVelocityWrapper) for wrapper in _wrappers(env)
    )
    assert registry.get_env("CartPoleNoVel-v1").threshold == 475
    assert "CartPoleNoVel-v1" in registry.get_algorithm("a3c").envs
    ppo_lstm = registry.get_algorithm("ppo_lstm")
    assert ppo_lstm.library == "sb3" and "ppo_lstm" in registry.peers_of("a3c")
    assert "CartPoleNoVel-v1" in yaml.safe_load(ppo_lstm.config_path().read_text())
    runs = suites.plan_runs(suites.get_suite("memory"), seeds=2)
    assert {(run.algo, run.seed) for run in runs if run.variant == "default"} == {
        (algo, seed) for algo in ("a3c", "ppo_lstm") for seed in (0, 1)
    }
    assert {run.env_id for run in runs} == {"CartPoleNoVel-v1"} and all(run.threshold == 475 for run in runs)


def _wrappers(env: gym.Env) -> list[gym.Env]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(env)
        env = env.env
    return found


@pytest.mark.slow
def test_learns_masked_velocity_cartpole(tmp_path: Path) -> None:
    """CartPole without its velocities needs memory: A3C-LSTM with its zoo entry (the ``memory`` suite's run) stops at
    a 475 deterministic evaluation, and the model ``learn()`` returns scores >= 475 over 10 fresh deterministic
    episodes; the feed-forward A3C with the same settings, given at least as many env steps, scores less."""
    from sb3_async.benchmark.run_one import run

    specs = {
        run_spec.variant: suites.RunSpec.from_dict({**run_spec.to_dict(), "final_eval_episodes": 10})
        for run_spec in suites.plan_runs(suites.get_suite("memory"), seeds=1)
        if run_spec.algo == "a3c"
    }
    lstm = run(specs["default"], tmp_path)
    assert lstm["reached"] and lstm["final_policy"]["mean"] >= 475, lstm["curve"]
    steps = max(int(lstm["env_steps"]), 100_000)
    feed_forward_spec = suites.RunSpec.from_dict(
        {**specs["feed-forward"].to_dict(), "max_steps": steps, "budget_seconds": None, "stop_at_threshold": False}
    )
    feed_forward = run(feed_forward_spec, tmp_path)
    print(f"A3C-LSTM: 475 after {lstm['env_steps']} steps; feed-forward after {steps} steps: {feed_forward['curve']}")
    assert feed_forward["final_policy"]["mean"] < lstm["final_policy"]["mean"]
