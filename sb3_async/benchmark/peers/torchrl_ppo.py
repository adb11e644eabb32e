"""TorchRL 0.14 PPO on CartPole-v1, Pendulum-v1 and HalfCheetah-v5: the peer of A3C.

Built and trained as TorchRL's state-based PPO example does (sota-implementations/ppo: ``ppo_mujoco.py``, its
``utils_mujoco.py`` and ``config_mujoco.yaml``): 64x64 tanh MLPs with orthogonal initialisation, ``ClipPPOLoss``, GAE
recomputed at every epoch, a ``SamplerWithoutReplacement`` replay buffer of one batch, Adam (eps 1e-5) with the
learning rate annealed linearly to 0 over the run. What differs from the example, and why:

- on CartPole-v1 and Pendulum-v1, the collector: ``MultiSyncCollector`` over ``num_workers`` processes instead of the
  example's single-process ``Collector`` (the fastest synchronous, hence on-policy, collector TorchRL documents for one
  machine), and no observation normalisation (``VecNorm``: each collector process would keep statistics of its own,
  and CartPole's and Pendulum's observations are of order 1 to 8; the example's ``normalize_observation``, off);
- on HalfCheetah-v5, the example as it is: its single-process ``Collector`` and its ``VecNorm`` (decay 0.99999, eps
  1e-2) then ``ClipTransform`` (±10) on the observation; the evaluated policy normalises with the training statistics
  frozen at the evaluation;
- the action head on CartPole-v1: a ``Categorical`` over its two actions, as TorchRL's discrete (Atari) PPO example
  has it; elsewhere the MuJoCo example's own head (a ``TanhNormal`` over the action bounds, its location from the MLP,
  a state-independent scale).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "torchrl"
PACKAGES = ("tensordict",)
#: sota-implementations/ppo/config_mujoco.yaml, utils_mujoco.py and ppo_mujoco.py: the example's settings.
_EXAMPLE = dict(
    # config_mujoco.yaml
    frames_per_batch=2048,
    n_timesteps=1_000_000,  # total_frames
    lr=3e-4,
    anneal_lr=True,
    gamma=0.99,
    mini_batch_size=64,
    ppo_epochs=10,
    gae_lambda=0.95,
    clip_epsilon=0.2,
    critic_coef=0.25,
    entropy_coef=0.0,
    loss_critic_type="l2",
    # utils_mujoco.py and ppo_mujoco.py
    hidden_sizes=[64, 64],
    adam_eps=1e-5,
    normalize_advantage=True,
    # this benchmark's layout: one collector process per core of the 2-core machine, as ours use 2 workers
    num_workers=2,
    normalize_observation=False,
)
HYPERPARAMETERS = {
    "CartPole-v1": dict(_EXAMPLE),
    "Pendulum-v1": dict(_EXAMPLE),
    # the example's own layout and observation normalisation (its env_name: HalfCheetah-v4, the same task)
    "HalfCheetah-v5": dict(_EXAMPLE, num_workers=1, normalize_observation=True),
}
SOURCES = {
    "CartPole-v1": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py) with "
    "a MultiSyncCollector and a Categorical head (the module docstring lists the differences)",
    "Pendulum-v1": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py: its "
    "TanhNormal head) with a MultiSyncCollector (the module docstring lists the differences)",
    "HalfCheetah-v5": "TorchRL 0.14 sota-implementations/ppo (config_mujoco.yaml, utils_mujoco.py, ppo_mujoco.py), "
    "its single-process Collector and VecNorm",
}

#: utils_mujoco.py's observation normalisation: ``VecNorm`` then ``ClipTransform``.
VECNORM = dict(decay=0.99999, eps=1e-2)
CLIP = 10.0


def make_env(env_id: str, normalize_observation: bool = False) -> Any:
    """The example's env pipeline: ``GymEnv``, ``VecNorm`` + ``ClipTransform`` where ``normalize_observation``,
    ``RewardSum``, ``StepCounter``, ``DoubleToFloat`` for float64 observations (MuJoCo's)."""
    import torch
    from torchrl.envs import ClipTransform, DoubleToFloat, RewardSum, StepCounter, TransformedEnv, VecNorm
    from torchrl.envs.libs.gym import GymEnv

    env = TransformedEnv(GymEnv(env_id, device="cpu", categorical_action_encoding=True))
    if normalize_observation:
        env.append_transform(VecNorm(in_keys=["observation"], new_api=False, **VECNORM))
        env.append_transform(ClipTransform(in_keys=["observation"], low=-CLIP, high=CLIP))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter())
    if env.observation_spec["observation"].dtype is torch.float64:
        env.append_transform(DoubleToFloat(in_keys=["observation"]))
    return env


def normalized(obs: np.ndarray, vecnorm: Any) -> np.ndarray:
    """``obs`` as the training env's ``VecNorm`` and ``ClipTransform`` pass it to the policy, with the statistics as
    they are now (``VecNorm``'s ``loc`` and ``scale``, read without updating them)."""
    loc, scale = vecnorm.loc["observation"].numpy(), vecnorm.scale["observation"].numpy()
    return np.clip((obs - loc) / np.maximum(scale, vecnorm.eps), -CLIP, CLIP)


def make_models(env: Any, hidden_sizes: list[int]) -> tuple[Any, Any]:
    """The example's actor and critic: a ``Categorical`` head for a discrete action space, the example's
    ``TanhNormal`` (state-independent scale) for a continuous one."""
    import torch
    from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
    from torchrl.data import Categorical
    from torchrl.envs.utils import ExplorationType
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator

    n_obs = env.observation_spec["observation"].shape[-1]
    action_spec = env.action_spec_unbatched
    discrete = isinstance(action_spec, Categorical)
    n_out = action_spec.space.n if discrete else action_spec.shape[-1]
    policy_mlp = MLP(in_features=n_obs, activation_class=torch.nn.Tanh, out_features=n_out, num_cells=hidden_sizes)
    value_mlp = MLP(in_features=n_obs, activation_class=torch.nn.Tanh, out_features=1, num_cells=hidden_sizes)
    for mlp, gain in ((policy_mlp, 1.0), (value_mlp, 0.01)):
        for layer in mlp.modules():
            if isinstance(layer, torch.nn.Linear):
                torch.nn.init.orthogonal_(layer.weight, gain)
                layer.bias.data.zero_()
    if discrete:
        head = TensorDictModule(policy_mlp, in_keys=["observation"], out_keys=["logits"])
        in_keys, distribution, distribution_kwargs = ["logits"], torch.distributions.Categorical, None
    else:
        location_and_scale = torch.nn.Sequential(policy_mlp, AddStateIndependentNormalScale(n_out, scale_lb=1e-8))
        head = TensorDictModule(location_and_scale, in_keys=["observation"], out_keys=["loc", "scale"])
        in_keys, distribution = ["loc", "scale"], TanhNormal
        distribution_kwargs = dict(low=action_spec.space.low, high=action_spec.space.high, tanh_loc=False)
    actor = ProbabilisticActor(
        head,
        in_keys=in_keys,
        spec=env.full_action_spec_unbatched,
        distribution_class=distribution,
        distribution_kwargs=distribution_kwargs,
        return_log_prob=True,
        default_interaction_type=ExplorationType.RANDOM,
    )
    critic = ValueOperator(value_mlp, in_keys=["observation"])
    return actor, critic


def train(run: PeerRun) -> None:
    import torch
    from tensordict import TensorDict
    from torchrl.collectors import Collector, MultiSyncCollector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.objectives import ClipPPOLoss, group_optimizers
    from torchrl.objectives.value import GAE

    settings = run.hyperparameters
    torch.manual_seed(run.seed)
    make = functools.partial(make_env, run.env_id, bool(settings["normalize_observation"]))
    proof = make()
    actor, critic = make_models(proof, settings["hidden_sizes"])
    proof.close()
    n_workers = int(settings["num_workers"])
    train_env = make() if n_workers == 1 else None  # the example's: its VecNorm holds the statistics
    vecnorm = train_env.transform[0] if train_env is not None and settings["normalize_observation"] else None

    def act(obs: np.ndarray) -> np.ndarray:
        if vecnorm is not None:
            obs = normalized(obs, vecnorm)
        observation = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            action = actor(TensorDict({"observation": observation}, batch_size=[len(obs)]))["action"]
        return action.numpy()

    frames_per_batch, total_frames = int(settings["frames_per_batch"]), run.max_steps
    n_minibatches = frames_per_batch // int(settings["mini_batch_size"])
    total_updates = (total_frames // frames_per_batch) * int(settings["ppo_epochs"]) * n_minibatches
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch),
        sampler=SamplerWithoutReplacement(),
        batch_size=int(settings["mini_batch_size"]),
    )
    advantage = GAE(gamma=settings["gamma"], lmbda=settings["gae_lambda"], value_network=critic, average_gae=False)
    loss_module = ClipPPOLoss(
        actor_network=actor,
        critic_network=critic,
        clip_epsilon=settings["clip_epsilon"],
        loss_critic_type=settings["loss_critic_type"],
        entropy_coeff=settings["entropy_coef"],
        critic_coeff=settings["critic_coef"],
        normalize_advantage=settings["normalize_advantage"],
    )
    lr = float(settings["lr"])
    optim = group_optimizers(
        torch.optim.Adam(actor.parameters(), lr=lr, eps=settings["adam_eps"]),
        torch.optim.Adam(critic.parameters(), lr=lr, eps=settings["adam_eps"]),
    )
    layout = dict(frames_per_batch=frames_per_batch, total_frames=total_frames, device="cpu", storing_device="cpu")
    if train_env is not None:
        collector: Any = Collector(create_env_fn=train_env, policy=actor, max_frames_per_traj=-1, **layout)
    else:
        collector = MultiSyncCollector(
            create_env_fn=[make] * n_workers,
            policy=actor,
            max_frames_per_traj=-1,
            num_threads=torch.get_num_threads(),  # the protocol's setting for this process, as for every algorithm
            **layout,
        )
    collector.set_seed(run.seed)
    run.start()
    collected, updates = 0, 0
    try:
        for data in collector:  # the workers wait between batches: nothing moves while the protocol evaluates
            collected += data.numel()
            for _ in range(int(settings["ppo_epochs"])):
                with torch.no_grad():
                    data = advantage(data)
                buffer.extend(data.reshape(-1))
                for batch in buffer:
                    if settings["anneal_lr"]:
                        for group in optim.param_groups:
                            group["lr"] = lr * max(0.0, 1 - updates / total_updates)
                    loss = loss_module(batch)
                    optim.zero_grad(set_to_none=True)
                    (loss["loss_critic"] + loss["loss_objective"] + loss["loss_entropy"]).backward()
                    optim.step()
                    updates += 1
            collector.update_policy_weights_()
            run.step(collected, act)
    finally:
        collector.shutdown()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
