"""Ours on the pool against stock SB3 through SuperSuit on MPE's ``simple_spread_v3`` (3 agents, parameter sharing: one
policy for every agent), at the same budget of slot steps.

Continuous actions, AE-DDPG against TD3 (``ae_ddpg``, ``td3_supersuit``): 2 env copies (6 slots), the same networks
(``pi=[64, 64]``, ``qf=[64, 64]``), batch 100, replay 100k, learning starts 600 slot steps. AE-DDPG with its defaults
otherwise (Zhang et al.), on ``AsyncEnvPool(make, n_envs=2, n_workers=1)``; TD3 with SB3's defaults otherwise (one
gradient step per vector step, as the RL Zoo runs TD3 with several envs) on
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), 2, num_cpus=1)``.

Discrete actions, A3C against PPO (``a3c``, ``ppo_supersuit``): 4 env copies (12 slots) each. A3C with the entry of
``zoo_configs/a3c.yml`` (2 workers of 2 copies, ``n_steps`` 25, entropy 0.01, learning rate 7e-4); PPO with SB3's
defaults (the RL Zoo's when it has no tuned entry) but ``n_steps=256`` and ``batch_size=256`` for 12 slots, on
``concat_vec_envs_v1(..., 4, num_cpus=1)``.

One torch thread. The model ``learn()`` returns is scored off the clock: the mean return per agent of 20
deterministic episodes (60 slot episodes) on a fresh pool, seeded 1000 + seed. Each run in a fresh process (``--one``).

    python benchmarks/scripts/pettingzoo_race.py --seeds 0 1 2 --steps 30000 --out benchmarks/results/pettingzoo_race
    python benchmarks/scripts/pettingzoo_race.py --algos a3c ppo_supersuit --seeds 0 1 2 --steps 200000 \\
        --steps-for a3c 270000 --out benchmarks/results/pettingzoo_race_a3c

Needs ``pip install "sb3-async[pettingzoo]" "supersuit>=3.11"``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ALGOS = ("ae_ddpg", "td3_supersuit", "a3c", "ppo_supersuit")
DISCRETE = ("a3c", "ppo_supersuit")
NET = {"net_arch": {"pi": [64, 64], "qf": [64, 64]}}
COMMON = {"batch_size": 100, "buffer_size": 100_000, "learning_starts": 600}


def make(continuous: bool = True):
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=continuous)


def supersuit_venv(copies: int, continuous: bool):
    import supersuit as ss

    env = ss.pettingzoo_env_to_vec_env_v1(make(continuous))
    return ss.concat_vec_envs_v1(env, copies, num_cpus=1, base_class="stable_baselines3")


def run_one(algo: str, seed: int, steps: int) -> dict:
    import numpy as np
    import torch
    from stable_baselines3.common.evaluation import evaluate_policy

    from sb3_async import AEDDPG, AsyncEnvPool

    torch.set_num_threads(1)
    continuous = algo not in DISCRETE
    factory = functools.partial(make, continuous)
    start = time.perf_counter()
    if algo == "a3c":
        from sb3_async import A3C

        model = A3C(
            "MlpPolicy", factory, n_workers=2, n_envs_per_worker=2, n_steps=25, ent_coef=0.01, learning_rate=7e-4,
            seed=seed,
        )  # fmt: skip
    elif algo == "ppo_supersuit":
        from stable_baselines3 import PPO
        from stable_baselines3.common.utils import set_random_seed

        set_random_seed(seed)  # SuperSuit's SB3 wrapper cannot be seeded (see the TD3 branch)
        model = PPO("MlpPolicy", supersuit_venv(4, continuous=False), n_steps=256, batch_size=256, device="cpu")
    elif algo == "ae_ddpg":
        pool = AsyncEnvPool(make, n_envs=2, n_workers=1)
        model = AEDDPG("MlpPolicy", pool, seed=seed, policy_kwargs=NET, **COMMON)
    else:
        from stable_baselines3 import TD3
        from stable_baselines3.common.noise import NormalActionNoise
        from stable_baselines3.common.utils import set_random_seed

        venv = supersuit_venv(2, continuous=True)
        n_actions = venv.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(n_actions), 0.1 * np.ones(n_actions))  # the RL Zoo's TD3 noise
        # SuperSuit's SB3 wrapper cannot be seeded (SB3's VecEnv.seed reaches ConcatVecEnv, which has no seed()):
        # TD3 gets seed=None, and the seed goes to Python, numpy and torch, not to the env copies
        set_random_seed(seed)
        model = TD3("MlpPolicy", venv, action_noise=noise, policy_kwargs=NET, **COMMON)
    model.learn(steps)
    train_seconds = time.perf_counter() - start
    with AsyncEnvPool(factory, n_envs=2, n_workers=0) as eval_pool:
        eval_env = eval_pool.as_vec_env()
        eval_env.seed(1000 + seed)
        score, _ = evaluate_policy(model, eval_env, n_eval_episodes=60)
    model.get_env().close()
    return {"algo": algo, "seed": seed, "steps": int(model.num_timesteps), "seconds": train_seconds, "score": float(score)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument(
        "--steps-for", nargs=2, action="append", default=[], metavar=("ALGO", "STEPS"), help="another budget for ALGO"
    )
    parser.add_argument("--one", nargs=2, metavar=("ALGO", "SEED"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.steps)))
        return
    budgets = {algo: args.steps for algo in args.algos} | {algo: int(steps) for algo, steps in args.steps_for}
    runs = []
    for seed in args.seeds:
        for algo in args.algos:  # interleaved, each in a fresh process
            command = [sys.executable, __file__, "--one", algo, str(seed), "--steps", str(budgets[algo])]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            runs.append(json.loads(line))
            print(line, flush=True)
    lines = [
        "# Ours on the pool against SB3 through SuperSuit on simple_spread_v3 (benchmarks/scripts/pettingzoo_race.py)",
        "",
        f"Slot steps: {', '.join(f'{algo} {steps}' for algo, steps in budgets.items())}; seeds {args.seeds}; score: mean"
        " return per agent, 60 deterministic slot episodes of the returned model. Command: `python"
        f" benchmarks/scripts/pettingzoo_race.py --seeds {' '.join(map(str, args.seeds))} --steps {args.steps}"
        f" --algos {' '.join(args.algos)}" + "".join(f" --steps-for {algo} {steps}" for algo, steps in args.steps_for) + "`",
        "",
        "| algo | seed | steps | train seconds | score |",
        "|---|---|---|---|---|",
        *(f"| {r['algo']} | {r['seed']} | {r['steps']} | {r['seconds']:.1f} | {r['score']:.2f} |" for r in runs),
        "",
        "| algo | median score | median train seconds |",
        "|---|---|---|",
    ]
    for algo in args.algos:
        mine = [r for r in runs if r["algo"] == algo]
        score, seconds = statistics.median(r["score"] for r in mine), statistics.median(r["seconds"] for r in mine)
        lines.append(f"| {algo} | {score:.2f} | {seconds:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "README.md").write_text(text)
        (args.out / "results.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
