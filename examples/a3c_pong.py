"""A3C on Pong with the paper's settings (Mnih et al. 2016, supp. §2).

16 actor-learners with one env each, t_max = 5, gamma = 0.99, entropy cost 0.01, shared RMSProp (alpha 0.99), the
paper's network (``CnnPolicy``: 16 8x8/4 and 32 4x4/2 conv filters, 256 hidden units), learning rate annealed
linearly to 0 (7e-4, inside the paper's LogUniform(1e-4, 1e-2) range), 84x84 grayscale frames stacked by 4 with an
action repeat of 4 (SB3's ``AtariWrapper``; ``sb3_async``'s here: the same observations, a faster frame skip). A
machine with fewer cores runs the same algorithm with fewer workers (``--n-workers``).

    python examples/a3c_pong.py                                  # 1e7 steps, 16 workers
    python examples/a3c_pong.py --n-workers 1 --timesteps 300    # smoke test

The same run through the RL Zoo: ``python -m sb3_async.train --algo a3c --env PongNoFrameskip-v4 -params n_envs:16
n_workers:16 n_envs_per_worker:1`` (without ``-params``, the zoo entry's 2 workers × 8 envs, one update per worker:
the benchmarked layout, faster on few cores).
"""

from __future__ import annotations

import argparse

import ale_py
import gymnasium as gym
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecFrameStack

from sb3_async import A3C
from sb3_async.common.atari_wrappers import make_atari_env  # SB3's, with the faster frame skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="PongNoFrameskip-v4")
    parser.add_argument("--timesteps", type=int, default=10_000_000, help="env steps (agent steps, 4 frames each)")
    parser.add_argument("--n-workers", type=int, default=16, help="actor-learners (16 in the paper)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="a3c_pong", help="where to save the model (.zip added)")
    parser.add_argument("--tensorboard-log", default=None)
    args = parser.parse_args()

    gym.register_envs(ale_py)  # the Atari ids
    # One env as the template: each worker builds its own copy (AtariWrapper inside, VecFrameStack re-applied).
    env = VecFrameStack(make_atari_env(args.env, n_envs=1, seed=args.seed), n_stack=4)
    model = A3C(
        "CnnPolicy",
        env,
        learning_rate=LinearSchedule(7e-4, 0.0, 1.0),  # annealed to 0 over the run
        n_steps=5,
        gamma=0.99,
        ent_coef=0.01,
        max_grad_norm=40.0,
        n_workers=args.n_workers,
        n_envs_per_worker=1,
        optimizer="shared_rmsprop",
        optimizer_kwargs=dict(alpha=0.99),
        tensorboard_log=args.tensorboard_log,
        seed=args.seed,
        verbose=1,
    )
    model.learn(args.timesteps, log_interval=1000)
    model.save(args.save_path)
    print(f"Saved to {args.save_path}.zip after {model.num_timesteps} steps")


if __name__ == "__main__":  # workers are separate processes (forkserver): the guard is required
    main()
