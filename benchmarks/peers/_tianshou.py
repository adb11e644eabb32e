"""What the Tianshou adapters share: Tianshou's own off-policy trainer driving the training, with the protocol's
:meth:`~sb3_async.benchmark.peers.protocol.PeerRun.step` in its ``training_fn`` hook (called before every collection
step: the previous gradient steps are done, nothing trains while the protocol evaluates), and Tianshou's deterministic
action (``policy.forward`` then ``policy.map_action``, no exploration noise) as the evaluated policy.

Tianshou's own test step (``test_collector``) is off: the protocol's evaluation replaces it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sb3_async.benchmark.peers.protocol import PeerRun

#: Tianshou's distributions: the peers' records hold their versions.
PACKAGES = ("tianshou",)


def seed_everything(seed: int) -> None:
    """What Tianshou's examples seed (numpy's and torch's global generators; the envs are seeded by the caller)."""
    import torch

    np.random.seed(seed)
    torch.manual_seed(seed)


def dummy_vector_env(env_id: str, n_envs: int, seed: int) -> Any:
    """``DummyVectorEnv`` of ``n_envs`` gymnasium envs, as Tianshou's examples build their training envs."""
    import gymnasium as gym
    from tianshou.env import DummyVectorEnv

    envs = DummyVectorEnv([lambda: gym.make(env_id) for _ in range(n_envs)])
    envs.seed(seed)
    return envs


def deterministic_policy(policy: Any) -> Callable[[np.ndarray], np.ndarray]:
    """The policy's action without exploration: ``forward`` (argmax Q, or the deterministic actor) then ``map_action``
    (the actor's [-1, 1] to the env's bounds), in inference mode."""
    import torch
    from tianshou.data import Batch
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad(), policy_within_training_step(policy, enabled=False), torch_train_mode(policy, False):
            action = policy(Batch(obs=obs, info={})).act
        if isinstance(action, torch.Tensor):
            action = action.cpu().numpy()
        return np.asarray(policy.map_action(action))

    return act


def train_off_policy(
    run: PeerRun,
    algorithm: Any,
    train_envs: Any,
    buffer: Any,
    settings: Mapping[str, Any],
    warmup_steps: int = 0,
    before_collect: Callable[[int], None] | None = None,
    random_warmup: bool = False,
) -> None:
    """Train with Tianshou's ``OffPolicyTrainer`` until the protocol ends the run.

    :param settings: ``epoch_num_steps``, ``collection_step_num_env_steps``, ``batch_size`` and
        ``update_step_num_gradient_steps_per_sample`` as in the example
    :param warmup_steps: env steps collected by the policy before the trainer starts (the example's initial
        ``train_collector.collect``), on the clock
    :param before_collect: called with the env steps so far before each collection step (the example's
        ``train_fn``, e.g. its epsilon schedule)
    :param random_warmup: the warm-up takes uniformly random actions (``collect(random=True)``, the MuJoCo examples'
        ``start_timesteps``)
    """
    from tianshou.data import CollectStats
    from tianshou.data.collector import Collector
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.torch_utils import policy_within_training_step

    policy = algorithm.policy
    act = deterministic_policy(policy)
    collector = Collector[CollectStats](algorithm, train_envs, buffer, exploration_noise=True)
    run.start()
    warm = 0
    if warmup_steps:
        with policy_within_training_step(policy):
            collector.reset()
            warm = collector.collect(n_step=warmup_steps, random=random_warmup).n_collected_steps

    def training_fn(epoch: int, env_step: int) -> None:
        if before_collect is not None:
            before_collect(warm + env_step)
        run.step(warm + env_step, act)

    epoch_num_steps = int(settings["epoch_num_steps"])
    algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=collector,
            test_collector=None,  # the protocol evaluates
            max_epochs=math.ceil(max(run.max_steps - warm, 1) / epoch_num_steps) + 1,  # the protocol stops it
            epoch_num_steps=epoch_num_steps,
            collection_step_num_env_steps=int(settings["collection_step_num_env_steps"]),
            batch_size=int(settings["batch_size"]),
            update_step_num_gradient_steps_per_sample=float(settings["update_step_num_gradient_steps_per_sample"]),
            training_fn=training_fn,
            show_progress=False,
            verbose=False,
        )
    )
    run.step(warm + collector.collect_step, act)


#: Tianshou's MuJoCo settings for TD3 (examples/mujoco/mujoco_td3.py, its defaults; the example multiplies the
#: exploration noise, the target-policy noise and its clip by the action bound: ``noise_times_action_bound``).
MUJOCO_TD3 = dict(
    buffer_size=1_000_000,
    hidden_sizes=[256, 256],
    actor_lr=3e-4,
    critic_lr=3e-4,
    gamma=0.99,
    tau=0.005,
    exploration_noise=0.1,
    policy_noise=0.2,
    noise_clip=0.5,
    update_actor_freq=2,
    start_timesteps=25_000,
    epoch_num_steps=5000,
    collection_step_num_env_steps=1,
    update_step_num_gradient_steps_per_sample=1.0,
    n_step=1,
    batch_size=256,
    num_train_envs=1,
    n_timesteps=1_000_000,  # 200 epochs of 5000 env steps
    noise_times_action_bound=True,
)

#: Tianshou's Pendulum-v1 settings for DDPG and TD3 (test/continuous/test_ddpg.py, test_td3.py: the same values for
#: what they share; TD3's own three come from test_td3.py only).
PENDULUM_ACTOR_CRITIC = dict(
    buffer_size=20_000,
    actor_lr=1e-4,
    critic_lr=1e-3,
    gamma=0.99,
    tau=0.005,
    exploration_noise=0.1,
    epoch_num_steps=20_000,
    collection_step_num_env_steps=8,
    update_step_num_gradient_steps_per_sample=0.125,
    batch_size=128,
    hidden_sizes=[128, 128],
    num_train_envs=8,
    n_step=3,
    n_timesteps=100_000,  # 5 epochs of 20 000 env steps
)


def scaled_noises(values: Mapping[str, Any], settings: Mapping[str, Any], max_action: float) -> dict[str, Any]:
    """``values`` with its noises (``exploration_noise``, ``policy_noise``, ``noise_clip``) multiplied by the action
    bound where ``settings`` says the example does so (``noise_times_action_bound``: Tianshou's MuJoCo examples)."""
    scale = max_action if settings.get("noise_times_action_bound") else 1.0
    noises = ("exploration_noise", "policy_noise", "noise_clip")
    return {key: value * scale if key in noises else value for key, value in values.items()}


def deterministic_actor_critic(run: PeerRun, algorithm_class: Any, **algorithm_kwargs: Any) -> None:
    """Build DDPG or TD3 as Tianshou's Pendulum tests and MuJoCo examples do (``Net`` MLPs, a
    ``ContinuousActorDeterministic`` scaled to the action bound, ``ContinuousCritic`` s on (s, a), Gaussian exploration
    noise, ``VectorReplayBuffer``) and train it, after ``start_timesteps`` random env steps where the settings have
    them (the MuJoCo examples)."""
    import gymnasium as gym
    from tianshou.algorithm.modelfree.ddpg import ContinuousDeterministicPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import VectorReplayBuffer
    from tianshou.exploration import GaussianNoise
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorDeterministic, ContinuousCritic

    settings = run.hyperparameters
    seed_everything(run.seed)
    env = gym.make(run.env_id)
    train_envs = dummy_vector_env(run.env_id, settings["num_train_envs"], run.seed)
    state_shape, action_shape = env.observation_space.shape, env.action_space.shape
    hidden = settings["hidden_sizes"]
    max_action = float(env.action_space.high[0])  # type: ignore[attr-defined]
    actor = ContinuousActorDeterministic(
        preprocess_net=Net(state_shape=state_shape, hidden_sizes=hidden), action_shape=action_shape, max_action=max_action
    )
    algorithm_kwargs = scaled_noises(algorithm_kwargs, settings, max_action)

    def critic() -> Any:
        return ContinuousCritic(
            preprocess_net=Net(state_shape=state_shape, action_shape=action_shape, hidden_sizes=hidden, concat=True)
        )

    exploration = GaussianNoise(sigma=scaled_noises(settings, settings, max_action)["exploration_noise"])
    policy = ContinuousDeterministicPolicy(actor=actor, exploration_noise=exploration, action_space=env.action_space)
    critics: dict[str, Any] = dict(critic=critic(), critic_optim=AdamOptimizerFactory(lr=settings["critic_lr"]))
    if "policy_noise" in settings:  # TD3: twin critics
        critics.update(critic2=critic(), critic2_optim=AdamOptimizerFactory(lr=settings["critic_lr"]))
    algorithm = algorithm_class(
        policy=policy,
        policy_optim=AdamOptimizerFactory(lr=settings["actor_lr"]),
        tau=settings["tau"],
        gamma=settings["gamma"],
        n_step_return_horizon=settings["n_step"],
        **critics,
        **algorithm_kwargs,
    )
    buffer = VectorReplayBuffer(settings["buffer_size"], len(train_envs))
    try:
        warmup = int(settings.get("start_timesteps", 0))
        train_off_policy(run, algorithm, train_envs, buffer, settings, warmup_steps=warmup, random_warmup=True)
    finally:
        train_envs.close()
        env.close()
