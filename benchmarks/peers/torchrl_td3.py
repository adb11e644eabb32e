"""TorchRL 0.14 TD3 on Pendulum-v1 and the MuJoCo tasks (HalfCheetah-v5, Hopper-v5, Walker2d-v5) with its
multi-process collector (``MultiSyncCollector``): the peer of AE-DDPG and Ape-X DPG.

Built and trained as TorchRL's TD3 example does (sota-implementations/td3: ``td3.py``, ``utils.py``, ``config.yaml``):
256x256 ReLU MLPs, a ``TanhModule`` actor scaled to the action bounds, ``AdditiveGaussianModule`` exploration (std
0.1), ``TD3Loss`` with twin Q networks, target policy noise and a delayed actor, ``SoftUpdate``, Adam per network, a
uniform replay buffer, ``frames_per_batch * utd_ratio`` gradient steps per batch once ``init_random_frames`` are in.
What differs from the example:

- TorchRL ships one TD3 config, for HalfCheetah-v4; its values are used as they are on Pendulum-v1 (25 000 random
  frames before the first update, as there), on HalfCheetah-v5 (v4's dynamics and reward), Hopper-v5 and
  Walker2d-v5 (the MuJoCo tasks the TD3 paper tunes one set of values for);
- ``MultiSyncCollector`` over ``num_workers`` processes instead of its single-process ``Collector``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "torchrl"
PACKAGES = ("tensordict",)
HYPERPARAMETERS = {
    "Pendulum-v1": dict(
        # sota-implementations/td3/config.yaml (its HalfCheetah-v4 entry, TorchRL's only TD3 config)
        n_timesteps=1_000_000,  # total_frames
        init_random_frames=25_000,
        frames_per_batch=1000,
        prb=False,
        buffer_size=1_000_000,
        utd_ratio=1.0,
        gamma=0.99,
        loss_function="l2",
        lr=3e-4,
        weight_decay=0.0,
        adam_eps=1e-4,
        batch_size=256,
        target_update_polyak=0.995,
        policy_update_delay=2,
        policy_noise=0.2,
        noise_clip=0.5,
        hidden_sizes=[256, 256],
        # utils.py: the exploration noise
        exploration_std=0.1,
        # this benchmark's layout: one collector process per core of the 2-core machine, as ours use 2 workers
        num_workers=2,
    ),
}
for _env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"):
    HYPERPARAMETERS[_env_id] = dict(HYPERPARAMETERS["Pendulum-v1"])
SOURCES = {
    "HalfCheetah-v5": "TorchRL 0.14 sota-implementations/td3 (config.yaml: its HalfCheetah-v4 entry, utils.py, td3.py) "
    "with a MultiSyncCollector",
    "Hopper-v5": "TorchRL 0.14 sota-implementations/td3 (config.yaml: its MuJoCo entry, written for HalfCheetah-v4, "
    "utils.py, td3.py) with a MultiSyncCollector",
    "Walker2d-v5": "TorchRL 0.14 sota-implementations/td3 (config.yaml: its MuJoCo entry, written for HalfCheetah-v4, "
    "utils.py, td3.py) with a MultiSyncCollector",
    "Pendulum-v1": "TorchRL 0.14 sota-implementations/td3 (config.yaml: its HalfCheetah-v4 values, utils.py, td3.py) "
    "with a MultiSyncCollector",
}


def make_env(env_id: str) -> Any:
    """The example's env pipeline: ``GymEnv`` + ``StepCounter``, ``InitTracker``, ``DoubleToFloat``, ``RewardSum``."""
    from torchrl.envs import Compose, DoubleToFloat, InitTracker, RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.libs.gym import GymEnv

    return TransformedEnv(GymEnv(env_id, device="cpu"), Compose(StepCounter(), InitTracker(), DoubleToFloat(), RewardSum()))


def train(run: PeerRun) -> None:
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.collectors import MultiSyncCollector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import MLP, AdditiveGaussianModule, TanhModule, ValueOperator
    from torchrl.objectives import SoftUpdate
    from torchrl.objectives.td3 import TD3Loss

    settings = run.hyperparameters
    torch.manual_seed(run.seed)
    np.random.seed(run.seed)
    proof = make_env(run.env_id)
    action_spec = proof.action_spec_unbatched
    hidden = settings["hidden_sizes"]
    actor = TensorDictSequential(
        TensorDictModule(
            MLP(num_cells=hidden, out_features=action_spec.shape[-1], activation_class=torch.nn.ReLU),
            in_keys=["observation"],
            out_keys=["param"],
        ),
        TanhModule(in_keys=["param"], out_keys=["action"], spec=action_spec),
    )
    qvalue = ValueOperator(
        MLP(num_cells=hidden, out_features=1, activation_class=torch.nn.ReLU), in_keys=["action", "observation"]
    )
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):  # the lazy layers take their shapes
        fake = proof.fake_tensordict()
        actor(fake)
        qvalue(fake)
    proof.close()
    explore = TensorDictSequential(
        actor, AdditiveGaussianModule(sigma_init=1, sigma_end=1, mean=0, std=settings["exploration_std"], spec=action_spec)
    )
    loss_module = TD3Loss(
        actor_network=actor,
        qvalue_network=qvalue,
        num_qvalue_nets=2,
        loss_function=settings["loss_function"],
        delay_actor=True,
        delay_qvalue=True,
        action_spec=action_spec,
        policy_noise=settings["policy_noise"],
        noise_clip=settings["noise_clip"],
    )
    loss_module.make_value_estimator(gamma=settings["gamma"])
    target_updater = SoftUpdate(loss_module, eps=settings["target_update_polyak"])
    adam = dict(lr=settings["lr"], weight_decay=settings["weight_decay"], eps=settings["adam_eps"])
    optimizer_actor = torch.optim.Adam(list(loss_module.actor_network_params.flatten_keys().values()), **adam)
    optimizer_critic = torch.optim.Adam(list(loss_module.qvalue_network_params.flatten_keys().values()), **adam)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(settings["buffer_size"]), batch_size=settings["batch_size"])

    def act(obs: np.ndarray) -> np.ndarray:
        observation = torch.as_tensor(obs, dtype=torch.float32)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            return actor(TensorDict({"observation": observation}, batch_size=[len(obs)]))["action"].numpy()

    collector = MultiSyncCollector(
        create_env_fn=[functools.partial(make_env, run.env_id)] * int(settings["num_workers"]),
        policy=explore,
        frames_per_batch=int(settings["frames_per_batch"]),
        total_frames=run.max_steps,
        init_random_frames=int(settings["init_random_frames"]),
        device="cpu",
        storing_device="cpu",
        num_threads=torch.get_num_threads(),  # the protocol's setting for this process, as for every algorithm
    )
    collector.set_seed(run.seed)
    n_updates = int(settings["frames_per_batch"] * settings["utd_ratio"])
    run.start()
    collected, updates = 0, 0
    try:
        for data in collector:  # the workers wait between batches: nothing moves while the protocol evaluates
            data = data.reshape(-1)
            buffer.extend(data)
            collected += data.numel()
            if collected >= settings["init_random_frames"]:
                for _ in range(n_updates):
                    updates += 1
                    batch = buffer.sample()
                    q_loss, *_ = loss_module.value_loss(batch)
                    q_loss.backward()
                    optimizer_critic.step()
                    optimizer_critic.zero_grad(set_to_none=True)
                    if updates % settings["policy_update_delay"] == 0:
                        actor_loss, *_ = loss_module.actor_loss(batch)
                        actor_loss.backward()
                        optimizer_actor.step()
                        optimizer_actor.zero_grad(set_to_none=True)
                        target_updater.step()
            collector.update_policy_weights_()
            run.step(collected, act)
    finally:
        collector.shutdown()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
