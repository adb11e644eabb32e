"""Action masks (sb3-contrib's ``action_masks()`` convention) in every discrete algorithm: the masked targets against
hand-computed values, runs on an env that raises on an illegal action (so a run that ends took none), ``predict`` with
``action_masks``, sb3-contrib's ``evaluate_policy`` and ``MaskableEvalCallback`` on our models, the Ray and serial
backends, and the errors for bad masks."""

from __future__ import annotations

import sys
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback
from sb3_contrib.common.maskable.evaluation import evaluate_policy
from sb3_contrib.common.wrappers import ActionMasker

import sb3_async
from sb3_async.apex.transitions import double_q_values
from sb3_async.common.buffers.masked import MaskedPrioritizedReplayBuffer
from sb3_async.common.masks import check_action_masks, legal_uniform, masked_argmax, masked_epsilon_greedy
from sb3_async.common.returns import nstep_q_targets, one_step_q_targets
from sb3_async.runtime import WorkerError

cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_ACTIONS = 6
DISCRETE = ("A3C", "AsyncOneStepQ", "AsyncSarsa", "AsyncNStepQ", "ApeXDQN")


class LegalSubsetEnv(gym.Env):
    """Each step a new random subset of the 6 actions is legal (each with probability 0.4, at least one); an illegal
    action raises ``ValueError``. The observation is the legal set; action 0 pays 1 and the others 0, so a learner
    unaware of the masks keeps wanting action 0, which is often illegal. Episodes end with probability 0.05, or are
    truncated after 30 steps (both kinds of ends; the env's own limit, not gymnasium's ``TimeLimit``, which the RL Zoo
    replaces in a process that imported it). ``empty_at``: the mask after that many steps has no legal action."""

    observation_space = gym.spaces.Box(0.0, 1.0, (N_ACTIONS,), np.float32)
    action_space = gym.spaces.Discrete(N_ACTIONS)

    def __init__(self, empty_at: int | None = None, max_episode_steps: int = 30):
        self.empty_at, self.steps, self.max_episode_steps, self.episode_steps = empty_at, 0, max_episode_steps, 0
        self.legal = np.ones(N_ACTIONS, dtype=bool)

    def _draw(self) -> np.ndarray:
        legal = self.np_random.random(N_ACTIONS) < 0.4
        legal[self.np_random.integers(N_ACTIONS)] = True
        self.legal = legal
        if self.empty_at is not None and self.steps >= self.empty_at:
            self.legal = np.zeros(N_ACTIONS, dtype=bool)
        return self.legal.astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode_steps = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.legal[int(action)]:
            raise ValueError(f"illegal action {int(action)}: legal are {np.flatnonzero(self.legal).tolist()}")
        self.steps += 1
        self.episode_steps += 1
        reward = 1.0 if int(action) == 0 else 0.0
        terminated = bool(self.np_random.random() < 0.05)
        return self._draw(), reward, terminated, not terminated and self.episode_steps >= self.max_episode_steps, {}


def legal_actions(env: gym.Env) -> np.ndarray:
    return env.unwrapped.legal.copy()


def masked_env(empty_at: int | None = None) -> gym.Env:
    """The test env with ``action_masks()`` (sb3-contrib's ``ActionMasker``) and a 30-step time limit."""
    return ActionMasker(LegalSubsetEnv(empty_at), legal_actions)


def masked_pendulum() -> gym.Env:
    return ActionMasker(gym.make("Pendulum-v1"), lambda env: np.ones(1, dtype=bool))


def masked_model(name: str, policy: str = "MlpPolicy", **kwargs: Any) -> Any:
    """A small model of ``name`` on :func:`masked_env`, learning from its first steps."""
    settings: dict[str, Any] = dict(seed=0, policy_kwargs=dict(net_arch=[16]))
    if name == "ApeXDQN":
        settings.update(n_actors=2, learning_starts=64, batch_size=32, block_size=10, buffer_size=5000)
    else:
        settings.update(n_workers=2, n_envs_per_worker=2)
    if name.startswith("Async"):
        settings.update(target_update_interval=200, exploration_fraction=0.5)
    return getattr(sb3_async, name)(policy, masked_env, **{**settings, **kwargs})


# --- pure functions, by hand ----------------------------------------------------------------------------------------


def test_one_step_q_target_maxes_over_the_next_states_legal_actions():
    """y0 = 1 + 0.9 * max(1, 3) = 3.7 (action 1, worth 5, is illegal; unmasked: 1 + 0.9 * 5 = 5.5); y1 = 0.5, done
    (its next state may have no legal action: it is never bootstrapped)."""
    next_q = np.array([[1.0, 5.0, 3.0], [2.0, 9.0, 1.0]])
    masks = np.array([[True, False, True], [False, False, False]])
    targets = one_step_q_targets(np.array([1.0, 0.5]), np.array([False, True]), next_q, 0.9, masks)
    np.testing.assert_allclose(targets, [3.7, 0.5], rtol=1e-6)
    np.testing.assert_allclose(one_step_q_targets(np.array([1.0, 0.5]), np.array([False, True]), next_q, 0.9), [5.5, 0.5])
    with pytest.raises(ValueError, match="row 0 has no legal action"):
        one_step_q_targets(np.array([1.0]), np.array([False]), next_q[:1], 0.9, masks[1:])


def test_n_step_q_target_bootstraps_from_the_last_states_legal_actions():
    """γ = 0.5, rewards 1 then 2, Q(s_T) = (4, 10, 6) with action 1 illegal: R_1 = 2 + 0.5 * 6 = 5, R_0 = 1 + 0.5 * 5
    = 3.5 (unmasked: R_1 = 7, R_0 = 4.5)."""
    rewards, dones, last_q = np.array([[1.0], [2.0]]), np.zeros((2, 1), dtype=bool), np.array([[4.0, 10.0, 6.0]])
    masked = nstep_q_targets(rewards, dones, last_q, 0.5, np.array([[True, False, True]]))
    np.testing.assert_allclose(masked, [[3.5], [5.0]])
    np.testing.assert_allclose(nstep_q_targets(rewards, dones, last_q, 0.5), [[4.5], [7.0]])


def test_double_q_argmax_is_over_the_legal_actions():
    """Online Q(s') = (1, 9, 3), target (10, 20, 30): the legal argmax is action 2 (30), unmasked action 1 (20)."""
    online, target = torch.tensor([[1.0, 9.0, 3.0]]), torch.tensor([[10.0, 20.0, 30.0]])
    assert double_q_values(online, target, np.array([[True, False, True]])).tolist() == [30.0]
    assert double_q_values(online, target).tolist() == [20.0]


def test_epsilon_greedy_and_argmax_pick_only_legal_actions():
    q = np.array([[5.0, 1.0, 2.0], [0.0, 3.0, 9.0]])
    masks = np.array([[False, True, True], [True, True, False]])
    assert masked_argmax(q, masks).tolist() == [2, 1]
    rng = np.random.default_rng(0)
    many = np.tile(masks, (500, 1))
    drawn = legal_uniform(many, rng)
    assert many[np.arange(len(many)), drawn].all()
    assert set(drawn[::2].tolist()) == {1, 2} and set(drawn[1::2].tolist()) == {0, 1}  # every legal action comes up
    actions = masked_epsilon_greedy(masked_argmax(np.tile(q, (500, 1)), many), 1.0, many, rng)
    assert many[np.arange(len(many)), actions].all()


def test_masked_replay_keeps_each_transitions_next_mask_across_the_ring():
    buffer = MaskedPrioritizedReplayBuffer(4, gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), device="cpu")
    masks = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [0, 1, 1], [1, 0, 1]], dtype=bool)
    for start in (0, 3):  # 6 transitions in a ring of 4: rows 0, 1 overwritten by the last two
        block = slice(start, start + 3)
        buffer.extend(
            np.zeros((3, 1, 2)), np.zeros((3, 1, 2)), np.zeros((3, 1, 1)), np.zeros((3, 1)), np.zeros((3, 1)), None,
            next_masks=masks[block, None],
        )  # fmt: skip
    np.testing.assert_array_equal(buffer.next_masks(np.array([0, 1, 2, 3])), masks[[4, 5, 2, 3]])
    batch = buffer.sample_arrays(8)
    expected = {0: masks[4], 1: masks[5], 2: masks[2], 3: masks[3]}
    for index, mask in zip(batch.indices, buffer.next_masks(batch.indices)):
        np.testing.assert_array_equal(mask, expected[int(index % 4)])


# --- bad input ------------------------------------------------------------------------------------------------------


def test_bad_masks_are_refused_clearly():
    def where(i: int) -> str:
        return f"env {i} at step 7"

    with pytest.raises(ValueError, match="env 1 at step 7: no legal action"):
        check_action_masks([[True, False], [False, False]], 2, where)
    with pytest.raises(ValueError, match=r"expected shape \(3,\)"):
        check_action_masks([True, False], 3, where)
    with pytest.raises(ValueError, match="expected bools"):
        check_action_masks(["yes", "no"], 2, where)
    with pytest.raises(ValueError, match="expected bools"):
        check_action_masks([2, 1], 2, where)
    assert check_action_masks([1, 0], 2, where).tolist() == [[True, False]]


def test_a_mask_without_legal_action_fails_learn_naming_the_env_and_step():
    model = sb3_async.AsyncNStepQ(
        "MlpPolicy", lambda: masked_env(empty_at=5), n_workers=1, seed=0, backend="serial", policy_kwargs=dict(net_arch=[8])
    )
    with pytest.raises(WorkerError, match=r"env 0 at step 5 of its worker: no legal action"):
        model.learn(200)


@pytest.mark.parametrize("name", ["A3C", "ApeXDPG", "AEDDPG"])
def test_continuous_algorithms_refuse_an_env_with_masks_naming_env(name):
    kwargs: dict[str, Any] = dict(n_envs=2, pool_kwargs=dict(n_hosts=0)) if name == "AEDDPG" else {}
    with pytest.raises(ValueError, match=r"Invalid env: it has action_masks\(\).*Box"):
        getattr(sb3_async, name)("MlpPolicy", masked_pendulum, **kwargs)


# --- runs: never an illegal action ----------------------------------------------------------------------------------

RUNS = [(name, "MlpPolicy") for name in DISCRETE] + [("A3C", "MlpLstmPolicy")]


def _runs_without_illegal_actions(name: str, policy: str, steps: int, **kwargs: Any) -> None:
    """The env raises on an illegal action, which fails ``learn()``: a run that ends took none."""
    model = masked_model(name, policy, **kwargs).learn(steps)
    assert model.num_timesteps >= steps and len(model.ep_info_buffer) > 0
    if name == "ApeXDQN":  # the learner trained on the masked replay
        assert isinstance(model.replay_buffer, MaskedPrioritizedReplayBuffer) and model._n_updates > 0


@pytest.mark.parametrize("name, policy", RUNS)
def test_every_discrete_algorithm_takes_only_legal_actions(name, policy):
    """10,000 env steps each (the LSTM policy, ~10x slower per step: 2,000 here, 10,000 under the ``slow`` marker)."""
    _runs_without_illegal_actions(name, policy, 2_000 if policy == "MlpLstmPolicy" else 10_000)


@pytest.mark.slow
def test_a3c_lstm_takes_only_legal_actions_for_10000_steps():
    _runs_without_illegal_actions("A3C", "MlpLstmPolicy", 10_000)


#: Ape-X in turns (backend="serial"): a replay ratio, so that the learner's turn is sized by the data, not the clock
SERIAL_SETTINGS: dict[str, dict[str, Any]] = {"A3C": {}, "ApeXDQN": dict(replay_ratio=1.0)}


@pytest.mark.parametrize("name", ["A3C", "ApeXDQN"])
def test_serial_backend_takes_only_legal_actions(name):
    _runs_without_illegal_actions(name, "MlpPolicy", 1_000, backend="serial", **SERIAL_SETTINGS[name])


@pytest.mark.parametrize("backend", [pytest.param("ray", marks=pytest.mark.ray, id="ray")])
def test_ray_backend_takes_only_legal_actions(backend):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    _runs_without_illegal_actions(
        "ApeXDQN", "MlpPolicy", 1_000, backend=backend, backend_kwargs={"init_kwargs": {"num_cpus": 2}}
    )


# --- predict, evaluate_policy, MaskableEvalCallback -----------------------------------------------------------------


@pytest.mark.parametrize("name, policy", RUNS)
def test_predict_never_returns_a_masked_action(name, policy):
    model = masked_model(name, policy, backend="serial")
    rng = np.random.default_rng(1)
    masks = rng.random((400, N_ACTIONS)) < 0.3
    masks[np.arange(400), rng.integers(N_ACTIONS, size=400)] = True
    obs = masks.astype(np.float32)
    obs[:] = 1.0  # every action looks legal to the network: only the masks keep it from the illegal ones
    for deterministic in (True, False):  # the async Q models explore with ε = 1 before training: random legal actions
        actions, _ = model.predict(obs, deterministic=deterministic, action_masks=masks)
        assert actions.shape == (400,) and masks[np.arange(400), actions].all()
    one_mask = np.zeros(N_ACTIONS, dtype=bool)
    one_mask[4] = True
    action, _ = model.predict(obs[0], action_masks=one_mask)  # one observation, one mask: one action, as unmasked
    assert np.shape(action) == np.shape(model.predict(obs[0])[0]) and int(action) == 4
    actions, _ = model.predict(obs[:5], action_masks=one_mask)  # one mask for every observation
    assert actions.tolist() == [4] * 5
    with pytest.raises(ValueError, match="no legal action"):
        model.predict(obs[:2], action_masks=np.zeros((2, N_ACTIONS), dtype=bool))
    with pytest.raises(ValueError, match="expected shape"):
        model.predict(obs[:2], action_masks=np.ones((2, N_ACTIONS + 1), dtype=bool))
    with pytest.raises(ValueError, match="3 rows for 2 observations"):
        model.predict(obs[:2], action_masks=np.ones((3, N_ACTIONS), dtype=bool))


@pytest.mark.parametrize("name", DISCRETE)
def test_sb3_contribs_evaluate_policy_works_with_our_models(name):
    model = masked_model(name, backend="serial")
    rewards, lengths = evaluate_policy(model, masked_env(), n_eval_episodes=3, return_episode_rewards=True, warn=False)
    assert len(rewards) == 3 and all(length > 0 for length in lengths)


def test_maskable_eval_callback_evaluates_inside_learn(tmp_path):
    callback = MaskableEvalCallback(masked_env(), eval_freq=100, n_eval_episodes=2, log_path=str(tmp_path), warn=False)
    masked_model("A3C", backend="serial").learn(800, callback=callback)
    assert len(callback.evaluations_results) >= 2
