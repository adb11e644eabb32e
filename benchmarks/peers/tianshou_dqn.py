"""Tianshou 2.0 DQN with n-step returns and its vectorized collector, on CartPole-v1 and LunarLander-v3: the peer of
the async Q family and Ape-X DQN.

Built as Tianshou's DQN examples build it (``DiscreteQLearningPolicy`` on a ``Net`` MLP, dueling where the example
is, ``DQN`` with double Q and a hard target update, a ``PrioritizedVectorReplayBuffer`` or ``VectorReplayBuffer`` as
the example has it, ``Collector`` over a ``DummyVectorEnv``) and trained by its ``OffPolicyTrainer``; every setting
below is the example's (see ``SOURCES``). CartPole-v1 has prioritized replay and 3-step returns; LunarLander-v3 has
the settings of Tianshou's LunarLander example (found by Optuna, its comment says): uniform replay, 4-step returns,
a dueling network and an exponentially decaying epsilon.
"""

from __future__ import annotations

import sys

from _tianshou import PACKAGES, dummy_vector_env, seed_everything, train_off_policy

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "tianshou"
HYPERPARAMETERS = {
    "CartPole-v1": dict(
        # Tianshou's README quick start, examples/discrete/discrete_dqn.py (2.0)
        lr=1e-3,
        batch_size=64,
        num_train_envs=10,
        n_step=3,
        target_update_freq=320,
        buffer_size=20_000,
        eps_train=0.1,
        eps_test=0.05,
        hidden_sizes=[128, 128, 128],
        epoch_num_steps=10_000,
        collection_step_num_env_steps=10,
        update_step_num_gradient_steps_per_sample=0.1,  # 1 / collection_step_num_env_steps
        n_timesteps=100_000,  # max_epochs=10 epochs of 10 000 env steps
        # test/discrete/test_dqn.py: its prioritized-replay variant (test_pdqn: prioritized replay with gamma 0.95
        # where the quick start's uniform replay has 0.9), the initial collection of batch_size * num_train_envs env
        # steps, and the epsilon schedule of its train_fn (eps_train up to 10k env steps, linear to eps_train / 10 at 50k)
        gamma=0.95,
        prioritized_replay=True,
        alpha=0.6,
        beta=0.4,
        eps_schedule=[10_000, 50_000],
    ),
    "LunarLander-v3": dict(
        # Tianshou's examples/box2d/lunarlander_dqn.py (its settings "found by Optuna"; LunarLander-v2 there, v3 here)
        lr=0.013,
        batch_size=128,
        num_train_envs=16,
        n_step=4,
        target_update_freq=500,
        buffer_size=100_000,
        gamma=0.99,
        eps_train=0.73,
        eps_test=0.01,
        eps_decay=5e-6,  # its train_fn: eps = max(eps_train * (1 - 5e-6) ** env_step, eps_test)
        hidden_sizes=[128, 128],
        dueling_hidden_sizes=[128, 128],  # the Q and the V streams (--dueling-q/v-hidden-sizes)
        epoch_num_steps=80_000,
        collection_step_num_env_steps=16,
        update_step_num_gradient_steps_per_sample=0.0625,  # one gradient step per 16 env steps
        n_timesteps=800_000,  # 10 epochs of 80 000 env steps
        prioritized_replay=False,
    ),
}
SOURCES = {
    "CartPole-v1": "Tianshou 2.0's examples/discrete/discrete_dqn.py (README quick start); prioritized replay (alpha, "
    "beta), warm-up collection and epsilon schedule from its test/discrete/test_dqn.py",
    "LunarLander-v3": "Tianshou's examples/box2d/lunarlander_dqn.py (dueling DQN, settings found by Optuna; the "
    "warm-up collection of batch_size * training_num env steps and the epsilon decay of its train_fn)",
}


def epsilon(settings: dict, env_step: int) -> float:
    """The example's ``train_fn``: with ``eps_decay`` (lunarlander_dqn.py) ``eps_train * (1 - eps_decay) ** env_step``
    down to ``eps_test``; otherwise (test_dqn.py) ``eps_train`` until the first step of ``eps_schedule``, then linear
    to a tenth of it at the second."""
    eps = float(settings["eps_train"])
    if "eps_decay" in settings:
        return max(eps * (1.0 - float(settings["eps_decay"])) ** env_step, float(settings["eps_test"]))
    start, end = settings["eps_schedule"]
    if env_step <= start:
        return eps
    if env_step <= end:
        return eps - (env_step - start) / (end - start) * (0.9 * eps)
    return 0.1 * eps


def train(run: PeerRun) -> None:
    import gymnasium as gym
    from tianshou.algorithm import DQN
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import PrioritizedVectorReplayBuffer, VectorReplayBuffer
    from tianshou.utils.net.common import Net

    settings = run.hyperparameters
    seed_everything(run.seed)
    env = gym.make(run.env_id)
    train_envs = dummy_vector_env(run.env_id, settings["num_train_envs"], run.seed)
    dueling = settings.get("dueling_hidden_sizes")
    net = Net(
        state_shape=env.observation_space.shape,
        action_shape=int(env.action_space.n),  # type: ignore[attr-defined]
        hidden_sizes=settings["hidden_sizes"],
        dueling_param=None if dueling is None else (dict(hidden_sizes=dueling), dict(hidden_sizes=dueling)),
    )
    policy = DiscreteQLearningPolicy(
        model=net, action_space=env.action_space, eps_training=settings["eps_train"], eps_inference=settings["eps_test"]
    )
    algorithm = DQN(
        policy=policy,
        optim=AdamOptimizerFactory(lr=settings["lr"]),
        gamma=settings["gamma"],
        n_step_return_horizon=settings["n_step"],
        target_update_freq=settings["target_update_freq"],
    )
    n_envs = len(train_envs)
    if settings["prioritized_replay"]:
        buffer = PrioritizedVectorReplayBuffer(
            settings["buffer_size"], buffer_num=n_envs, alpha=settings["alpha"], beta=settings["beta"]
        )
    else:
        buffer = VectorReplayBuffer(settings["buffer_size"], n_envs)
    try:
        train_off_policy(
            run,
            algorithm,
            train_envs,
            buffer,
            settings,
            warmup_steps=settings["batch_size"] * n_envs,
            before_collect=lambda env_step: policy.set_eps_training(epsilon(settings, env_step)),
        )
    finally:
        train_envs.close()
        env.close()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
