"""Ablation of the replay and exploration parts with stock SB3 TD3 (do they help a stock algorithm?).

Pendulum-v1: uniform replay vs EpisodicDualReplayBuffer (rho 0.05 / 0.15 / 0.25, and the hmemory_top_k option);
NormalActionNoise vs OrnsteinUhlenbeckActionNoise vs RandomWalkActionNoise. MountainCarContinuous-v0: each noise.
Each run is a fresh process (one torch thread); runs are interleaved seed by seed; the deterministic evaluation
(10 episodes) runs off the clock every ``eval_freq`` steps; a run stops when its evaluation mean reaches the
threshold or at its step budget.

    python benchmarks/scripts/replay_ablation.py all --seeds 3 --jobs 2      # runs, then writes results.json/md and curves
    python benchmarks/scripts/replay_ablation.py report                      # rewrites results.md and the PNG from the JSONs
    python benchmarks/scripts/replay_ablation.py run --config pendulum-uniform-normal --seed 0   # one run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "replay_parts"

ENVS: dict[str, dict[str, Any]] = {
    # TD3 settings of the rl-zoo (td3.yml) except the smaller net, the earlier learning start, the budget and, on
    # MountainCar, one gradient step every 4 env steps (the machine is shared): net [64, 64], learning_starts 1000.
    "Pendulum-v1": dict(threshold=-200.0, budget=20_000, eval_freq=1_000, gamma=0.98, noise_std=0.1, train_freq=1),
    "MountainCarContinuous-v0": dict(threshold=90.0, budget=50_000, eval_freq=10_000, gamma=0.99, noise_std=0.5, train_freq=4),
}

CONFIGS: dict[str, dict[str, Any]] = {
    "pendulum-uniform-normal": dict(env="Pendulum-v1", replay=None, noise="normal"),
    "pendulum-dual0.05-normal": dict(env="Pendulum-v1", replay=dict(rho=0.05), noise="normal"),
    "pendulum-dual0.15-normal": dict(env="Pendulum-v1", replay=dict(rho=0.15), noise="normal"),
    "pendulum-dual0.25-normal": dict(env="Pendulum-v1", replay=dict(rho=0.25), noise="normal"),
    "pendulum-uniform-ou": dict(env="Pendulum-v1", replay=None, noise="ou"),
    "pendulum-uniform-randomwalk": dict(env="Pendulum-v1", replay=None, noise="randomwalk"),
    "mountaincar-normal": dict(env="MountainCarContinuous-v0", replay=None, noise="normal"),
    "mountaincar-ou": dict(env="MountainCarContinuous-v0", replay=None, noise="ou"),
    "mountaincar-randomwalk": dict(env="MountainCarContinuous-v0", replay=None, noise="randomwalk"),
    "pendulum-dual0.15top10-normal": dict(env="Pendulum-v1", replay=dict(rho=0.15, hmemory_top_k=10), noise="normal"),
}


def run_one(config_name: str, seed: int, out_dir: Path) -> dict[str, Any]:
    """Train one configuration in this process; the evaluation is excluded from the clock."""
    import gymnasium as gym
    import torch as th
    from stable_baselines3 import TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    from sb3_async import EpisodicDualReplayBuffer, RandomWalkActionNoise

    th.set_num_threads(1)
    config = CONFIGS[config_name]
    env_cfg = ENVS[config["env"]]
    env = gym.make(config["env"])
    eval_env = Monitor(gym.make(config["env"]))
    eval_env.reset(seed=10_000 + seed)
    n_actions = env.action_space.shape[0]
    zeros, std = np.zeros(n_actions), env_cfg["noise_std"] * np.ones(n_actions)
    noise = {
        "normal": lambda: NormalActionNoise(zeros, std),
        "ou": lambda: OrnsteinUhlenbeckActionNoise(zeros, std),
        "randomwalk": lambda: RandomWalkActionNoise(zeros),
    }[config["noise"]]()
    replay_kwargs: dict[str, Any] = {}
    if config["replay"] is not None:
        replay_kwargs = dict(replay_buffer_class=EpisodicDualReplayBuffer, replay_buffer_kwargs=dict(config["replay"]))
    model = TD3(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        gamma=env_cfg["gamma"],
        buffer_size=200_000,
        learning_starts=1_000,
        train_freq=env_cfg["train_freq"],
        action_noise=noise,
        policy_kwargs=dict(net_arch=[64, 64]),
        seed=seed,
        device="cpu",
        **replay_kwargs,
    )
    curve: list[tuple[int, float, float]] = []
    state = dict(eval_seconds=0.0, start=time.perf_counter())

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % env_cfg["eval_freq"]:
                return True
            t0 = time.perf_counter()
            mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=10, deterministic=True)
            state["eval_seconds"] += time.perf_counter() - t0
            train_seconds = time.perf_counter() - state["start"] - state["eval_seconds"]
            curve.append((self.num_timesteps, train_seconds, float(mean)))
            return mean < env_cfg["threshold"]

    model.learn(env_cfg["budget"], callback=Evaluate())
    reached = [(s, t) for s, t, m in curve if m >= env_cfg["threshold"]]
    result: dict[str, Any] = dict(
        config=config_name,
        env=config["env"],
        seed=seed,
        threshold=env_cfg["threshold"],
        budget=env_cfg["budget"],
        curve=curve,
        steps_to_threshold=reached[0][0] if reached else None,
        seconds_to_threshold=reached[0][1] if reached else None,
    )
    buffer = model.replay_buffer
    if isinstance(buffer, EpisodicDualReplayBuffer):
        result.update(
            episodes=buffer.n_episodes,
            hmemory_episodes=buffer.n_hmemory_episodes,
            hmemory_size=buffer.h_size,
            r_max=buffer.r_max,
            last_admission_episode=buffer.last_admission_episode,
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{config_name}-seed{seed}.json").write_text(json.dumps(result))
    return result


def run_all(configs: list[str], seeds: list[int], jobs: int, out_dir: Path, skip: list[str]) -> None:
    """Fresh process per run, ``jobs`` at a time; the report is rewritten after each run.

    Order: every configuration but the last (an option, not the paper's rule) for the first three seeds, seed by
    seed; then the last configuration for those seeds; then the remaining seeds. Runs with results, or named in
    ``skip`` as ``config:seed``, are not run.
    """
    main_configs, extra = configs[:-1], configs[-1:]
    order = [(c, s) for s in seeds[:3] for c in main_configs] + [(c, s) for s in seeds[:3] for c in extra]
    order += [(c, s) for s in seeds[3:] for c in configs]
    queue = [(c, s) for c, s in order if f"{c}:{s}" not in skip and not (out_dir / "runs" / f"{c}-seed{s}.json").exists()]
    running: list[tuple[subprocess.Popen[bytes], str, int]] = []
    while queue or running:
        while queue and len(running) < jobs:
            config, seed = queue.pop(0)
            cmd = [sys.executable, __file__, "run", "--config", config, "--seed", str(seed), "--out", str(out_dir)]
            running.append((subprocess.Popen(cmd, env=os.environ.copy()), config, seed))
        time.sleep(2)
        for item in list(running):
            proc, config, seed = item
            if proc.poll() is not None:
                running.remove(item)
                print(f"{config} seed {seed}: exit {proc.returncode}", flush=True)
                report(out_dir)


def report(out_dir: Path) -> None:
    """results.json, results.md (medians over seeds) and curves PNG from the per-run JSONs."""
    runs = [json.loads(p.read_text()) for p in sorted((out_dir / "runs").glob("*.json"))]
    if not runs:
        return
    (out_dir / "results.json").write_text(json.dumps(runs, indent=1))
    lines = [
        "# Replay and exploration parts: stock SB3 TD3 ablation",
        "",
        "Generated by `benchmarks/scripts/replay_ablation.py` (each run a fresh process, one torch thread, runs interleaved, "
        "evaluation off the clock: 10 deterministic episodes every `eval_freq` steps; a run stops at its threshold). "
        "Seconds are training seconds on a 2-core machine: seeds 0-2 and seed 3 of the first three configurations ran "
        "while other jobs shared the machine (load 7 to 25), the other runs of seeds 3-4 two at a time on an otherwise "
        "idle machine (2026-11-24), so seconds compare configurations only within a seed, and barely there. "
        "TD3 as in the rl-zoo except net [64, 64], learning_starts 1000 and, on MountainCar, "
        "train_freq 4. Noise: Normal and OU with the zoo's sigma (Pendulum 0.1, MountainCar 0.5; SB3's OU dt 0.01), "
        "RandomWalk with its defaults (sigma 0.05, reflect at 1).",
        "",
        "| config | env | seeds | reached | median steps to threshold | median seconds to threshold "
        "| best eval mean (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in CONFIGS:
        group = [r for r in runs if r["config"] == config]
        if not group:
            continue
        reached = [r for r in group if r["steps_to_threshold"] is not None]
        # Runs that never reached the threshold count as the budget (so the median is a lower bound then).
        steps = [r["steps_to_threshold"] if r["steps_to_threshold"] is not None else np.inf for r in group]
        secs = [r["seconds_to_threshold"] if r["seconds_to_threshold"] is not None else np.inf for r in group]
        best = [max(m for _, _, m in r["curve"]) if r["curve"] else float("nan") for r in group]
        med_steps, med_secs = np.median(steps), np.median(secs)
        lines.append(
            f"| {config} | {group[0]['env']} (≥ {group[0]['threshold']:g}) | {len(group)} | {len(reached)}/{len(group)} "
            f"| {'> budget' if np.isinf(med_steps) else f'{med_steps:.0f}'} "
            f"| {'-' if np.isinf(med_secs) else f'{med_secs:.0f}'} | {np.median(best):.1f} |"
        )
    dual = [r for r in runs if "hmemory_episodes" in r]
    if dual:
        lines += [
            "",
            "HMemory admissions (the R_max failure mode): episodes admitted / episodes ended, and the episode of the "
            "last admission.",
            "",
            "| config | seed | admitted / episodes | last admission (episode) | R_max | HMemory size |",
            "|---|---|---|---|---|---|",
        ]
        for r in sorted(dual, key=lambda r: (r["config"], r["seed"])):
            lines.append(
                f"| {r['config']} | {r['seed']} | {r['hmemory_episodes']} / {r['episodes']} | {r['last_admission_episode']} "
                f"| {r['r_max']:.1f} | {r['hmemory_size']} |"
            )
    (out_dir / "results.md").write_text("\n".join(lines) + "\n")
    plot(runs, out_dir)


def plot(runs: list[dict[str, Any]], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = sorted({r["env"] for r in runs})
    fig, axes = plt.subplots(1, len(envs), figsize=(7 * len(envs), 4.5), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for config in CONFIGS:
            group = [r for r in runs if r["config"] == config and r["env"] == env]
            for i, r in enumerate(group):
                if r["curve"]:
                    steps, _, means = zip(*r["curve"])
                    color = f"C{list(CONFIGS).index(config) % 10}"
                    ax.plot(steps, means, color=color, alpha=0.7, label=config if i == 0 else None)
        ax.axhline(ENVS[env]["threshold"], color="k", linestyle="--", linewidth=0.8)
        ax.set_title(f"TD3 on {env} (each line a seed; runs stop at the threshold)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("evaluation mean (10 episodes)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "curves.png", dpi=90)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run")
    one.add_argument("--config", choices=list(CONFIGS), required=True)
    one.add_argument("--seed", type=int, required=True)
    one.add_argument("--out", type=Path, default=OUT)
    many = sub.add_parser("all")
    many.add_argument("--configs", nargs="*", choices=list(CONFIGS), default=list(CONFIGS))
    many.add_argument("--seeds", type=int, default=5)
    many.add_argument("--jobs", type=int, default=1)
    many.add_argument("--out", type=Path, default=OUT)
    many.add_argument("--skip", nargs="*", default=[], help="config:seed pairs not to run (e.g. running elsewhere)")
    rep = sub.add_parser("report")
    rep.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.command == "run":
        run_one(args.config, args.seed, args.out / "runs")
    elif args.command == "all":
        run_all(args.configs, list(range(args.seeds)), args.jobs, args.out, args.skip)
        report(args.out)
    else:
        report(args.out)


if __name__ == "__main__":
    main()
