"""TorchRL 0.14 DQN on CartPole-v1 and LunarLander-v3 with its multi-process collector (``MultiSyncCollector``): the
peer of the async Q family and Ape-X DQN.

Built and trained as TorchRL's CartPole DQN example does (sota-implementations/dqn: ``dqn_cartpole.py``,
``utils_cartpole.py``, ``config_cartpole.yaml``): a ReLU MLP ``QValueActor``, ``EGreedyModule`` annealed over the
collected frames, ``DQNLoss`` (delayed target network) with a ``HardUpdate``, Adam, a uniform
``TensorDictReplayBuffer``, ``num_updates`` gradient steps per collected batch once ``init_random_frames`` are in.
What differs from the example:

- ``MultiSyncCollector`` over ``num_workers`` processes instead of its single-process ``Collector`` (the example has
  no prioritized replay; it is not added);
- TorchRL ships DQN settings for CartPole and Atari only. On LunarLander-v3 the example's code runs with the RL Zoo's
  tuned DQN recipe for the task (``rl_zoo3/hyperparams/dqn.yml``, the settings SB3's DQN peer runs with), each value
  mapped to its TorchRL counterpart: one gradient step per env step (``train_freq`` 4 with ``gradient_steps`` -1),
  the target network copied every 250 of them, the Huber loss and the gradient-norm clip of 10 of SB3's DQN.
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
    "CartPole-v1": dict(
        # sota-implementations/dqn/config_cartpole.yaml
        n_timesteps=500_100,  # total_frames
        frames_per_batch=1000,
        eps_start=1.0,
        eps_end=0.05,
        annealing_frames=250_000,
        init_random_frames=10_000,
        buffer_size=10_000,
        batch_size=128,
        lr=2.5e-4,
        gamma=0.99,
        hard_update_freq=50,
        num_updates=100,
        # utils_cartpole.py
        hidden_sizes=[120, 84],
        # this benchmark's layout: one collector process per core of the 2-core machine, as ours use 2 workers
        num_workers=2,
    ),
}
HYPERPARAMETERS["LunarLander-v3"] = dict(
    # rl_zoo3 2.9 hyperparams/dqn.yml, LunarLander-v3 (tuned), mapped onto the example's settings
    n_timesteps=1_000_000,  # the zoo's is 1e5: longer, so that the race's budget ends a run, not its step count
    lr=6.3e-4,
    batch_size=128,
    buffer_size=50_000,
    init_random_frames=0,  # learning_starts
    gamma=0.99,
    hard_update_freq=250,  # target_update_interval 250 env steps = 250 gradient steps at one per env step
    eps_start=1.0,
    eps_end=0.1,  # exploration_final_eps
    annealing_frames=12_000,  # exploration_fraction 0.12 of the zoo's 1e5 steps
    hidden_sizes=[256, 256],  # policy_kwargs net_arch; ReLU, SB3's DQN default
    # SB3 DQN's loss and gradient clip (its defaults, which the zoo's recipe was tuned with)
    loss_function="smooth_l1",
    max_grad_norm=10.0,
    # train_freq 4 with gradient_steps -1: one gradient step per env step, the collected batch kept short (200 frames)
    # so that the acting policy follows the learner as closely as the example's collector allows
    frames_per_batch=200,
    num_updates=200,
    num_workers=2,
)
SOURCES = {
    "CartPole-v1": "TorchRL 0.14 sota-implementations/dqn (config_cartpole.yaml, utils_cartpole.py, dqn_cartpole.py) "
    "with a MultiSyncCollector",
    "LunarLander-v3": "TorchRL 0.14 sota-implementations/dqn (dqn_cartpole.py, utils_cartpole.py) with a "
    "MultiSyncCollector, run with rl_zoo3 2.9's tuned DQN settings for LunarLander-v3 (hyperparams/dqn.yml; TorchRL "
    "ships none for it)",
}


def make_env(env_id: str) -> Any:
    """The example's env: ``GymEnv`` + ``RewardSum`` + ``StepCounter`` (one-hot actions, TorchRL's default)."""
    from torchrl.envs import RewardSum, StepCounter, TransformedEnv
    from torchrl.envs.libs.gym import GymEnv

    env = TransformedEnv(GymEnv(env_id, device="cpu"))
    env.append_transform(RewardSum())
    env.append_transform(StepCounter())
    return env


def train(run: PeerRun) -> None:
    import torch
    from tensordict import TensorDict
    from tensordict.nn import TensorDictSequential
    from torchrl.collectors import MultiSyncCollector
    from torchrl.data import Composite, LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.modules import MLP, EGreedyModule, QValueActor
    from torchrl.objectives import DQNLoss, HardUpdate

    settings = run.hyperparameters
    torch.manual_seed(run.seed)
    proof = make_env(run.env_id)
    action_spec = proof.specs["input_spec", "full_action_spec", "action"]
    mlp = MLP(
        in_features=proof.observation_spec["observation"].shape[-1],
        activation_class=torch.nn.ReLU,
        out_features=action_spec.space.n,
        num_cells=settings["hidden_sizes"],
    )
    model = QValueActor(module=mlp, spec=Composite(action=action_spec), in_keys=["observation"])
    proof.close()
    greedy = EGreedyModule(
        annealing_num_steps=settings["annealing_frames"],
        eps_init=settings["eps_start"],
        eps_end=settings["eps_end"],
        spec=model.spec,
    )
    explore = TensorDictSequential(model, greedy)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(max_size=settings["buffer_size"]), batch_size=settings["batch_size"]
    )
    loss_module = DQNLoss(value_network=model, loss_function=settings.get("loss_function", "l2"), delay_value=True)
    loss_module.make_value_estimator(gamma=settings["gamma"])
    target_updater = HardUpdate(loss_module, value_network_update_interval=settings["hard_update_freq"])
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=settings["lr"])

    def act(obs: np.ndarray) -> np.ndarray:  # the greedy action (one-hot in TorchRL) as an index
        with torch.no_grad():
            action = model(TensorDict({"observation": torch.as_tensor(obs, dtype=torch.float32)}, batch_size=[len(obs)]))
        return action["action"].argmax(-1).numpy()

    collector = MultiSyncCollector(
        create_env_fn=[functools.partial(make_env, run.env_id)] * int(settings["num_workers"]),
        policy=explore,
        frames_per_batch=int(settings["frames_per_batch"]),
        total_frames=run.max_steps,
        device="cpu",
        storing_device="cpu",
        max_frames_per_traj=-1,
        init_random_frames=int(settings["init_random_frames"]),
        num_threads=torch.get_num_threads(),  # the protocol's setting for this process, as for every algorithm
    )
    collector.set_seed(run.seed)
    run.start()
    collected = 0
    try:
        for data in collector:  # the workers wait between batches: nothing moves while the protocol evaluates
            data = data.reshape(-1)
            buffer.extend(data)
            collected += data.numel()
            greedy.step(data.numel())
            if collected >= settings["init_random_frames"]:
                for _ in range(int(settings["num_updates"])):
                    loss = loss_module(buffer.sample())["loss"]
                    optimizer.zero_grad()
                    loss.backward()
                    if "max_grad_norm" in settings:
                        torch.nn.utils.clip_grad_norm_(loss_module.parameters(), settings["max_grad_norm"])
                    optimizer.step()
                    target_updater.step()
            collector.update_policy_weights_()
            run.step(collected, act)
    finally:
        collector.shutdown()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
