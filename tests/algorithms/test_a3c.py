"""Short runs of A3C with every env form, policy and action space."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.envs import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
    SimpleMultiObsEnv,
)
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack
from stable_baselines3.dqn.policies import DQNPolicy

from sb3_async import A3C, AEDDPG, ApeXDQN, AsyncNStepQ, MnihCNN
from sb3_async.common.callbacks import LiveProgressBar
from tests.helpers import ALGORITHM_NAMES, small_model


def make_cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize(
    "env",
    [
        "CartPole-v1",
        make_cartpole,
        gym.make("CartPole-v1"),
        DummyVecEnv([lambda: IdentityEnv(10)]),
        VecFrameStack(DummyVecEnv([make_cartpole]), 2),
    ],
    ids=["id", "factory", "gym.Env", "DummyVecEnv", "VecFrameStack"],
)
def test_env_forms(env):
    model = A3C("MlpPolicy", env, n_workers=2, n_envs_per_worker=2, seed=0).learn(400)
    assert model.num_timesteps >= 400
    assert model.n_envs == 4 and model.get_env().num_envs == 4
    obs = model.observation_space.sample()
    action, _ = model.predict(obs, deterministic=True)
    assert model.action_space.contains(action.item() if np.ndim(action) == 0 else action)


@pytest.mark.parametrize(
    "env_factory",
    [
        lambda: IdentityEnvBox(-1, 1, ep_length=20),
        lambda: IdentityEnvMultiDiscrete(3, ep_length=20),
        lambda: IdentityEnvMultiBinary(3, ep_length=20),
        lambda: gym.make("Pendulum-v1"),
    ],
    ids=["Box", "MultiDiscrete", "MultiBinary", "Pendulum"],
)
def test_action_spaces(env_factory):
    model = A3C("MlpPolicy", env_factory, n_workers=2, seed=1).learn(300)
    assert model.num_timesteps >= 300


def test_softplus_gaussian_policy_on_pendulum():
    model = A3C("SoftplusMlpPolicy", "Pendulum-v1", ent_coef=1e-4, n_workers=2, seed=0).learn(300)
    assert not hasattr(model.policy, "log_std")
    distribution = model.policy.get_distribution(model.policy.obs_to_tensor(model.observation_space.sample())[0])
    assert distribution.distribution.scale.shape == (1, 1)
    with pytest.raises(ValueError, match="Box action space"):
        A3C("SoftplusMlpPolicy", "CartPole-v1", n_workers=1)


def test_cnn_policy_uses_paper_network():
    model = A3C(
        "CnnPolicy",
        lambda: FakeImageEnv(screen_height=84, screen_width=84, n_channels=4, discrete=True),
        n_workers=2,
        seed=0,
    )
    assert isinstance(model.policy.features_extractor, MnihCNN)
    convs = [m for m in model.policy.features_extractor.cnn if hasattr(m, "kernel_size")]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [(16, (8, 8), (4, 4)), (32, (4, 4), (2, 2))]
    model.learn(100)
    assert model.num_timesteps >= 100


def test_multi_input_policy():
    model = A3C("MultiInputPolicy", lambda: SimpleMultiObsEnv(random_start=False), n_workers=2, seed=0).learn(200)
    assert model.num_timesteps >= 200


def test_progress_bar_and_evaluate_policy():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    model.learn(1000, progress_bar=True)
    mean, std = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=2)
    assert mean > 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0),
        lambda: AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=2, learning_starts=100, pool_kwargs=dict(n_hosts=0), seed=0),
    ],
    ids=["A3C", "AEDDPG"],
)
def test_the_progress_bar_shows_steps_per_second_and_the_mean_return(make):
    """``learn(progress_bar=True)`` uses LiveProgressBar; its description gives the env steps per second and, once an
    episode ended, SB3's ep_rew_mean (the mean of the episodes the model keeps)."""
    model = make()
    callback = model._init_callback(None, progress_bar=True)
    assert any(isinstance(item, LiveProgressBar) for item in callback.callbacks)

    class Checked(LiveProgressBar):
        def _on_step(self) -> bool:
            super()._on_step()
            self.expected = [info["r"] for info in self.model.ep_info_buffer]  # what the description was made of
            return True

    bar = Checked(interval=0.0)  # a description at every step
    model.learn(1000, callback=bar)
    rate, mean = bar.pbar.desc.split(", ")
    assert rate.endswith(" steps/s") and float(rate.split()[0].replace(",", "")) > 0
    assert mean == f"ep_rew_mean {float(np.mean(bar.expected)):.4g}"


def test_atari_vec_env_template():
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from stable_baselines3.common.env_util import make_atari_env

    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), 4)
    model = A3C("CnnPolicy", env, n_workers=2, seed=0)
    assert model.observation_space.shape == (4, 84, 84)
    # the paper's heads sit on the 256 features (supp. §2): no hidden layer between them
    assert model.policy.action_net.in_features == 256 and model.policy.value_net.in_features == 256
    assert not any(isinstance(m, torch.nn.Linear) for m in model.policy.mlp_extractor.modules())
    model.learn(100)
    assert model.num_timesteps >= 100


def test_unsupported_action_space():
    class TupleActionEnv(gym.Env):
        observation_space = spaces.Box(-1, 1, (2,))
        action_space = spaces.Tuple((spaces.Discrete(2), spaces.Discrete(2)))

    with pytest.raises(ValueError, match="action space"):
        A3C("MlpPolicy", TupleActionEnv(), n_workers=1)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_other_start_methods(start_method):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, start_method=start_method, seed=0).learn(500)
    assert model.num_timesteps >= 500


@pytest.mark.parametrize("optimizer", ["shared_rmsprop", "rmsprop", "sgd"])
def test_optimizers_update_shared_parameters(optimizer):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, optimizer=optimizer, seed=0)
    before = [p.detach().clone() for p in model.policy.parameters()]
    statistics_before = [t.clone() for t in model.policy.optimizer.state_tensors()]
    model.learn(1000)
    assert all(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    moved = any(not torch.equal(a, b) for a, b in zip(statistics_before, model.policy.optimizer.state_tensors()))
    assert moved == (optimizer == "shared_rmsprop")  # per-worker statistics stay in the workers


def test_env_id_registered_only_in_this_process():
    gym.register(
        "Sb3AsyncLocalCartPole-v0", entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=100
    )
    model = A3C("MlpPolicy", "Sb3AsyncLocalCartPole-v0", n_workers=2, seed=0).learn(300)
    assert model.num_timesteps >= 300
    with pytest.raises(ValueError, match="NoSuchEnv-v0"):
        A3C("MlpPolicy", "NoSuchEnv-v0", n_workers=1)


def test_env_built_before_a_library_patches_gymnasium(tmp_path):
    """rl_zoo3 replaces gymnasium's TimeLimit by a subclass on import; an env built before must still reach workers."""
    script = tmp_path / "patched.py"
    script.write_text(
        "import gymnasium as gym\n"
        "env = gym.make('CartPole-v1')\n"
        "import rl_zoo3.gym_patches  # noqa: F401  (TimeLimit is now rl_zoo3's subclass)\n"
        "from sb3_async import A3C\n"
        "if __name__ == '__main__':\n"
        "    assert type(env) is not gym.wrappers.TimeLimit  # built with the original class\n"
        "    A3C('MlpPolicy', env, n_workers=1, seed=0).learn(300)\n"
        "    print('learned')\n"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "learned" in result.stdout, result.stderr[-3000:]


def test_threads_beside_workers_caps_and_restores(monkeypatch):
    from sb3_async.common import torch_utils

    monkeypatch.setattr(torch_utils, "usable_cpus", lambda: 4)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with torch_utils.threads_beside_workers(2) as threads:
            assert threads == 2 == torch.get_num_threads()  # 4 CPUs - 2 workers
        assert torch.get_num_threads() == 3
        with torch_utils.threads_beside_workers(8) as threads:  # more workers than CPUs: still one thread
            assert threads == 1 == torch.get_num_threads()
        with torch_utils.threads_beside_workers(1) as threads:  # never raised above the user's choice
            assert threads == 3 == torch.get_num_threads()
        with pytest.raises(KeyError), torch_utils.threads_beside_workers(3):
            raise KeyError("restored after an exception too")
        assert torch.get_num_threads() == 3
        with torch_utils.threads_beside_workers(0) as threads:  # no local workers (a joined Ray cluster)
            assert threads == 3
    finally:
        torch.set_num_threads(before)


def test_learn_leaves_the_workers_their_cpus(monkeypatch):
    """Torch's one thread per core next to busy workers oversubscribes the CPUs (the Ape-X learner ran at half speed):
    during learn() the main process uses the CPUs the workers leave free, and its own setting comes back after."""
    from stable_baselines3.common.callbacks import BaseCallback

    from sb3_async.common import torch_utils

    monkeypatch.setattr(torch_utils, "usable_cpus", lambda: 3)
    seen = []

    class Threads(BaseCallback):
        def _on_step(self) -> bool:
            seen.append(torch.get_num_threads())
            return True

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0).learn(200, callback=Threads())
        assert seen and set(seen) == {1}  # 3 CPUs - 2 workers
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_main_process_threads_choice():
    from sb3_async.common.torch_utils import main_process_threads

    assert main_process_threads(cpus=8, busy_processes=2, current=8) == 6  # the CPUs the others leave free
    assert main_process_threads(cpus=2, busy_processes=4, current=2) == 1  # at least one
    assert main_process_threads(cpus=16, busy_processes=2, current=4) == 4  # never above the caller's count
    assert main_process_threads(cpus=4, busy_processes=0, current=3) == 3  # nothing busy here: the caller's count
    assert main_process_threads(cpus=2, busy_processes=4, current=2, requested=3) == 3  # the user's count wins


class _ThreadsSeen(BaseCallback):
    """The main process's torch threads and the logged ``config/torch_threads`` at each callback step."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()
        self.logged: set[int] = set()

    def _on_step(self) -> bool:
        self.threads.add(torch.get_num_threads())
        if "config/torch_threads" in self.model.logger.name_to_value:
            self.logged.add(self.model.logger.name_to_value["config/torch_threads"])
        return True


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_torch_threads_override_is_honored_logged_and_restored(name):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        model = small_model(name, torch_threads=2)
        seen = _ThreadsSeen()
        model.learn(100, callback=seen)
        assert seen.threads == seen.logged == {2}
        assert torch.get_num_threads() == 1
        if name == "AEDDPG":
            model.env.close()
        with pytest.raises(ValueError, match="torch_threads"):
            small_model(name, torch_threads=0)
    finally:
        torch.set_num_threads(before)


def test_flush_denormals_restores_the_previous_mode():
    from sb3_async.common.torch_utils import flush_denormals, flushes_denormals

    assert not flushes_denormals()  # IEEE arithmetic outside learn()
    with flush_denormals() as supported:
        assert flushes_denormals() == supported
        assert (torch.tensor(1e-30) * 1e-10).item() == (0.0 if supported else pytest.approx(1e-40, rel=1e-2))
        with flush_denormals():
            pass
        assert flushes_denormals() == supported  # an inner block leaves the outer one's mode
    assert not flushes_denormals()


class _DenormalsSeen(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.seen: set[bool] = set()

    def _on_step(self) -> bool:
        from sb3_async.common.torch_utils import flushes_denormals

        self.seen.add(flushes_denormals())
        return True


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_denormals_are_flushed_while_learning_only(name):
    from sb3_async.common.torch_utils import flush_denormals, flushes_denormals

    with flush_denormals() as supported:
        pass
    model = small_model(name)
    seen = _DenormalsSeen()
    model.learn(100, callback=seen)
    assert seen.seen == {supported}
    assert not flushes_denormals()
    if name == "AEDDPG":
        model.env.close()


def test_aeddpg_leaves_its_env_processes_their_cpus(monkeypatch):
    """AE-DDPG's learner beside its pool's env processes: the CPUs they leave free (3 CPUs - 2 env processes)."""
    from sb3_async.common import torch_utils

    monkeypatch.setattr(torch_utils, "usable_cpus", lambda: 3)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        model = small_model("AEDDPG", pool_kwargs=dict(n_hosts=2))
        seen = _ThreadsSeen()
        model.learn(60, callback=seen)
        model.env.close()
        assert seen.threads == seen.logged == {1}
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("model_class", "policy_class", "required", "workers"),
    [
        (A3C, DQNPolicy, "ActorCriticPolicy", dict(n_workers=1)),
        (AsyncNStepQ, ActorCriticPolicy, "DQNPolicy", dict(n_workers=1)),
        (ApeXDQN, ActorCriticPolicy, "DQNPolicy", dict(n_actors=1, buffer_size=1000)),
    ],
    ids=["A3C", "AsyncNStepQ", "ApeXDQN"],
)
def test_a_policy_class_without_the_algorithms_heads_is_refused(model_class, policy_class, required, workers):
    """The losses use the heads of one policy family: another family's class fails at construction, naming both."""
    match = rf"policy={policy_class.__name__}: {model_class.__name__} needs a subclass of {required}"
    with pytest.raises(TypeError, match=match):
        model_class(policy_class, "CartPole-v1", **workers)
