"""Runs whose TensorBoard logs show the ``async/`` keys: a healthy and an oversubscribed A3C, and Ape-X DQN with and
without a fixed replay ratio, all on CartPole-v1 (docs: "Debugging and monitoring an async run").

    python examples/monitoring.py --log-dir monitoring_logs          # about 3 minutes on 2 cores
    tensorboard --logdir monitoring_logs                             # look at them
    python -m sb3_async.benchmark --tensorboard monitoring_logs      # or draw monitoring_a3c.png, monitoring_apex.png

- ``a3c_2_workers``: the zoo's A3C entry, 2 workers x 8 envs: one worker per core.
- ``a3c_8_workers``: the same 16 envs as 8 workers x 2 envs: four workers per core, so they wait for one another.
- ``apex_ratio_32``: the zoo's Ape-X DQN entry, one actor and ``replay_ratio=32``: the learner sets the pace.
- ``apex_free``: the same without ``replay_ratio`` (the paper's setting): each side as fast as it can.
"""

from __future__ import annotations

import argparse

import torch as th

from sb3_async import A3C, ApeXDQN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-dir", default="monitoring_logs", help="TensorBoard log folder (one sub-folder per run)")
    parser.add_argument("--a3c-timesteps", type=int, default=1_000_000)
    parser.add_argument("--apex-timesteps", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    a3c = dict(learning_rate=1e-3, ent_coef=0.0, seed=args.seed, tensorboard_log=args.log_dir)
    for n_workers in (2, 8):
        model = A3C("MlpPolicy", "CartPole-v1", n_workers=n_workers, n_envs_per_worker=16 // n_workers, **a3c)
        # a log every 300 x 80 steps: windows of a fraction of a second, longer than the workers' 50 ms reports
        model.learn(args.a3c_timesteps, log_interval=300, tb_log_name=f"a3c_{n_workers}_workers")
    apex = dict(
        n_actors=1,
        n_envs_per_actor=2,
        learning_rate=2e-3,
        batch_size=256,
        buffer_size=2500,
        learning_starts=1000,
        target_update_interval=25,
        policy_kwargs=dict(net_arch=[64, 64], optimizer_class=th.optim.Adam),
        seed=args.seed,
        tensorboard_log=args.log_dir,
    )
    for name, ratio in (("apex_ratio_32", 32.0), ("apex_free", None)):
        model = ApeXDQN("MlpPolicy", "CartPole-v1", replay_ratio=ratio, **apex)
        model.learn(args.apex_timesteps, log_interval=600, tb_log_name=name)  # a log every 600 x 2 envs x n_steps=3


if __name__ == "__main__":
    main()
