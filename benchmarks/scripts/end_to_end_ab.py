"""Training throughput, this checkout against another version of sb3_async (A/B, same machine, same run): stock PPO
on ``AsyncEnvPool(...).as_vec_env()``, AEDDPG on its own pool, the worker-process algorithms (A3C, async n-step Q,
Ape-X DQN) on CartPole-v1, A3C on Pong, and A3C's Pong zoo entry through the training CLI; env steps per second with
training included (start-up included).

The same user code runs against both versions, each case in a fresh process with that version first on ``PYTHONPATH``
(the cases use only what both versions have: ``AsyncEnvPool(factories, n_workers=, local_envs=).as_vec_env()`` and
``AEDDPG(policy, env_id)``), rounds interleaved (the version that
runs first alternates from round to round), one torch thread everywhere. Medians over rounds, and the median of the
per-round ratios.

Usage::

    git worktree add /tmp/sb3-async-old <commit>
    python benchmarks/scripts/end_to_end_ab.py --baseline /tmp/sb3-async-old --rounds 3 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: name -> (algorithm, env id, layout, env steps); the layout is PPO's pool's (n_workers, local_envs), A3C's on Pong
#: (n_workers, n_envs_per_worker), ``"zoo"`` for the version's own zoo entry run by ``python -m sb3_async.train``, None
#: elsewhere (the algorithm's own pool, or 2 workers x 8 envs)
CASES = {
    "PPO CartPole-v1, 2 workers": ("ppo", "CartPole-v1", (2, 0), 16_384),
    "PPO CartPole-v1, 1 worker + main": ("ppo", "CartPole-v1", (1, 4), 16_384),
    "PPO HalfCheetah-v5, 2 workers": ("ppo", "HalfCheetah-v5", (2, 0), 8_192),
    "PPO HalfCheetah-v5, 1 worker + main": ("ppo", "HalfCheetah-v5", (1, 4), 8_192),
    "PPO Pong, 2 workers": ("ppo", "PongNoFrameskip-v4", (2, 0), 2_048),
    "PPO Pong, 1 worker + main": ("ppo", "PongNoFrameskip-v4", (1, 4), 2_048),
    "AEDDPG Pendulum-v1": ("ae_ddpg", "Pendulum-v1", None, 3_000),
    "AEDDPG HalfCheetah-v5": ("ae_ddpg", "HalfCheetah-v5", None, 3_000),
    "A3C CartPole-v1, 2 workers x 8 envs": ("a3c", "CartPole-v1", None, 200_000),
    "AsyncNStepQ CartPole-v1, 2 workers x 8 envs": ("async_n_step_q", "CartPole-v1", None, 200_000),
    "ApeXDQN CartPole-v1, 2 actors": ("apex_dqn", "CartPole-v1", None, 50_000),
    "A3C Pong, 2 workers x 8 envs": ("a3c", "PongNoFrameskip-v4", (2, 8), 60_000),
    "A3C Pong, 16 workers x 1 env (the paper's layout)": ("a3c", "PongNoFrameskip-v4", (16, 1), 20_000),
    "A3C Pong, the zoo entry (python -m sb3_async.train)": ("a3c", "PongNoFrameskip-v4", "zoo", 60_000),
}


def make_env(env_id: str):  # noqa: ANN201 - a gymnasium env
    import gymnasium as gym

    if env_id.startswith("Pong"):
        import ale_py
        from stable_baselines3.common.atari_wrappers import AtariWrapper

        gym.register_envs(ale_py)
        return AtariWrapper(gym.make(env_id))
    return gym.make(env_id)


def zoo_rate(algo: str, env_id: str, steps: int) -> float:
    """Env steps per second of ``python -m sb3_async.train --algo ALGO --env ENV_ID -n STEPS`` in this process: the
    version's own zoo entry (its ``zoo_configs/``), no evaluations, start-up and saving included."""
    import tempfile

    from sb3_async.train import main as train

    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        train(["--algo", algo, "--env", env_id, "-n", str(steps), "--eval-freq", "-1", "--seed", "0", "-f", folder])
        return steps / (time.perf_counter() - start)


def run_case(name: str) -> float:
    """Env steps per second of one case, in this process (the version of sb3_async first on the path)."""
    import functools

    import torch

    torch.set_num_threads(1)
    algo, env_id, layout, steps = CASES[name]
    if layout == "zoo":
        return zoo_rate(algo, env_id, steps)
    if algo == "ppo":
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import VecFrameStack

        from sb3_async import AsyncEnvPool

        n_workers, local_envs = layout
        factories = [functools.partial(make_env, env_id)] * 8
        venv = AsyncEnvPool(factories, n_workers=n_workers, local_envs=local_envs).as_vec_env()
        policy = "MlpPolicy"
        if env_id.startswith("Pong"):
            venv, policy = VecFrameStack(venv, 4), "CnnPolicy"
        model = PPO(policy, venv, n_steps=256, batch_size=256, n_epochs=4, seed=0, device="cpu")
    elif algo == "ae_ddpg":
        from sb3_async import AEDDPG

        model = AEDDPG("MlpPolicy", env_id, seed=0, learning_starts=1_000)
    elif algo == "apex_dqn":
        from sb3_async import ApeXDQN

        model = ApeXDQN("MlpPolicy", env_id, n_actors=2, seed=0, learning_starts=1_000)
    else:
        from sb3_async import A3C, AsyncNStepQ

        algorithm = A3C if algo == "a3c" else AsyncNStepQ
        if env_id.startswith("Pong"):  # the paper's settings on SB3's Atari stack
            import ale_py
            import gymnasium as gym
            from stable_baselines3.common.vec_env import VecFrameStack

            from sb3_async.common.atari_wrappers import make_atari_env

            gym.register_envs(ale_py)
            n_workers, per_worker = layout
            venv = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=0), 4)
            model = A3C("CnnPolicy", venv, n_workers=n_workers, n_envs_per_worker=per_worker, max_grad_norm=40.0, seed=0)
        else:
            model = algorithm("MlpPolicy", env_id, n_workers=2, n_envs_per_worker=8, seed=0)
    start = time.perf_counter()
    model.learn(steps)
    rate = model.num_timesteps / (time.perf_counter() - start)
    env = model.get_env()
    if env is not None:
        env.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="a checkout of the other version (its root)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--out", default=None, help="a folder for results.json and README.md")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case here, print its rate
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    versions = {"this checkout": str(ROOT), "baseline": str(Path(args.baseline).resolve())}
    commits = {
        name: subprocess.run(["git", "-C", src, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        for name, src in versions.items()
    }
    rates: dict[str, dict[str, list[float]]] = {case: {v: [] for v in versions} for case in args.cases}
    for round_ in range(args.rounds):
        for case in args.cases:
            order = list(versions.items())
            if round_ % 2:  # who runs first alternates from round to round
                order.reverse()
            for version, src in order:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
                out = subprocess.run(
                    [sys.executable, __file__, "--baseline", args.baseline, "--case", case],
                    capture_output=True, text=True, env=env, cwd=src, check=True,
                )  # fmt: skip
                rates[case][version].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(case, {v: round(r[-1]) for v, r in rates[case].items()}, flush=True)
    lines = [
        "# Training throughput, A/B (benchmarks/scripts/end_to_end_ab.py)",
        "",
        f"This checkout {commits['this checkout']} against {commits['baseline']}; {args.rounds} interleaved rounds (who runs"
        " first alternates), a fresh"
        " process per run, one torch thread; env steps per second with training included (medians), and the median of"
        " the per-round ratios.",
        "",
        f"| case | {commits['this checkout']} | {commits['baseline']} | ratio |",
        "|---|---|---|---|",
    ]
    for case, by_version in rates.items():
        new, old = by_version["this checkout"], by_version["baseline"]
        ratio = statistics.median(a / b for a, b in zip(new, old))
        lines.append(f"| {case} | {statistics.median(new):,.0f} | {statistics.median(old):,.0f} | **{ratio:.2f}** |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as file:
            json.dump({"args": vars(args), "commits": commits, "steps_per_s": rates}, file, indent=1)
        with open(os.path.join(args.out, "README.md"), "w") as file:
            file.write(text)


if __name__ == "__main__":
    main()
