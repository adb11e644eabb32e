"""Soak test of checkpoints: an ApeXDQN run on CartPole-v1 killed with SIGKILL at random moments, resumed each time
from its last checkpoint, must still learn the task.

Each run is a child process (with its actors) training with SB3's ``CheckpointCallback(save_replay_buffer=True)``
every ``--save-freq`` steps and an ``EvalCallback`` that stops training once 10 evaluation episodes average 475.
The parent kills the child's whole process group with SIGKILL ``--kills`` times, at a random moment 2 to 10 s after it
started training (mid-update, mid-save, anywhere); each new child resumes from the newest checkpoint whose model and
replay files both exist (``load``, ``load_replay_buffer``, ``learn(reset_num_timesteps=False)``). The last child runs
to the end; its model is evaluated on 20 fresh episodes and must score at least 475 - ``--margin``.

    python benchmarks/scripts/soak_resume.py --kills 5 --seed 0 --folder /tmp/soak

Prints the kills, the resumes with their step counts and replay sizes, and the final score; exits 1 if the final
score is below the threshold.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

THRESHOLD = 475.0
# zoo_configs/apex_dqn.yml's CartPole-v1 entry
HYPERPARAMS = dict(
    n_actors=1,
    n_envs_per_actor=2,
    learning_rate=2e-3,
    batch_size=256,
    buffer_size=2500,
    learning_starts=1000,
    target_update_interval=25,
    replay_ratio=32,
)


def latest_checkpoint(folder: Path) -> int | None:
    """The newest step count with both a model and a replay file (a kill between the two saves leaves only the model)."""
    steps = [int(m.group(1)) for path in folder.glob("rl_model_*_steps.zip") if (m := re.search(r"_(\d+)_steps", path.name))]
    complete = [n for n in steps if (folder / f"rl_model_replay_buffer_{n}_steps.pkl").is_file()]
    return max(complete, default=None)


def child(folder: Path, total: int, save_freq: int, seed: int) -> None:
    import gymnasium as gym
    import torch as th
    from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback, StopTrainingOnRewardThreshold

    from sb3_async import ApeXDQN

    steps = latest_checkpoint(folder)
    if steps is None:
        policy_kwargs = dict(net_arch=[64, 64], optimizer_class=th.optim.Adam)
        model = ApeXDQN("MlpPolicy", "CartPole-v1", policy_kwargs=policy_kwargs, seed=seed, **HYPERPARAMS)  # type: ignore[arg-type]
        print("start: fresh model", flush=True)
    else:
        model = ApeXDQN.load(folder / f"rl_model_{steps}_steps.zip")
        model.load_replay_buffer(folder / f"rl_model_replay_buffer_{steps}_steps.pkl")
        assert model.replay_buffer is not None and model.num_timesteps == steps
        print(f"start: resumed at {steps} steps, replay {model.replay_buffer.size()} transitions", flush=True)
    checkpoint = CheckpointCallback(save_freq=save_freq // model.n_envs, save_path=str(folder), save_replay_buffer=True)
    stop = StopTrainingOnRewardThreshold(THRESHOLD)
    every = 2000 // model.n_envs
    evaluation = EvalCallback(gym.make("CartPole-v1"), eval_freq=every, n_eval_episodes=10, callback_on_new_best=stop)
    print("training", flush=True)
    model.learn(max(total - model.num_timesteps, 1), callback=[checkpoint, evaluation], reset_num_timesteps=False)
    model.save(folder / "final.zip")
    print(f"done: {model.num_timesteps} steps, last evaluation {evaluation.last_mean_reward:.1f}", flush=True)


def run_child(args: argparse.Namespace, kill_after: float | None) -> bool:
    """One child; SIGKILL to its process group ``kill_after`` seconds after it starts training. Returns whether it was
    killed (False: it finished)."""
    command = [sys.executable, __file__, "--child", "--folder", str(args.folder), "--total", str(args.total)]
    command += ["--save-freq", str(args.save_freq), "--seed", str(args.seed)]
    root = str(Path(__file__).resolve().parents[2])  # this checkout's sb3_async, wherever the script is run from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
    training = threading.Event()

    def relay() -> None:  # the child's progress lines, as they come
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(("start:", "done:")):
                print(f"  {line.rstrip()}", flush=True)
            elif line.strip() == "training":
                training.set()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    deadline = None
    while process.poll() is None:
        if deadline is None and training.is_set() and kill_after is not None:
            deadline = time.monotonic() + kill_after
        if deadline is not None and time.monotonic() >= deadline:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            reader.join(timeout=5)
            return True
        time.sleep(0.05)
    reader.join(timeout=5)
    if process.returncode != 0:
        raise SystemExit(f"the training child failed with exit code {process.returncode}")
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--folder", type=Path, default=Path("soak_checkpoints"))
    parser.add_argument("--total", type=int, default=150_000, help="env steps of the whole run")
    parser.add_argument("--save-freq", type=int, default=1000, help="env steps between two checkpoints")
    parser.add_argument("--margin", type=float, default=75.0, help="final score must be >= 475 - margin")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.folder, args.total, args.save_freq, args.seed)
        return
    shutil.rmtree(args.folder, ignore_errors=True)
    args.folder.mkdir(parents=True)
    rng = random.Random(args.seed)
    kills = 0
    while True:
        kill_after = rng.uniform(2.0, 10.0) if kills < args.kills else None
        if not run_child(args, kill_after):
            break
        kills += 1
        print(f"kill {kills}: SIGKILL {kill_after:.1f} s into training; newest complete checkpoint: "
              f"{latest_checkpoint(args.folder)} steps", flush=True)  # fmt: skip

    import gymnasium as gym
    from stable_baselines3.common.evaluation import evaluate_policy

    from sb3_async import ApeXDQN

    model = ApeXDQN.load(args.folder / "final.zip")
    env = gym.make("CartPole-v1")
    env.reset(seed=12345)
    mean, std = evaluate_policy(model, env, n_eval_episodes=20, deterministic=True, warn=False)
    stray = sorted(path.name for path in args.folder.glob(".*.tmp"))
    print(f"kills: {kills}, resumes: {kills}, final model: {model.num_timesteps} steps, score {mean:.1f} +- {std:.1f} "
          f"(20 episodes; threshold {THRESHOLD:.0f} - {args.margin:.0f}); stray temporary files: {len(stray)}")  # fmt: skip
    if mean < THRESHOLD - args.margin:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
