"""Ours on the pool against stock SB3 through SuperSuit on MPE's ``simple_spread_v3`` (3 agents, parameter sharing: one
policy for every agent), at the same budget of slot steps.

Continuous actions, AE-DDPG against TD3 (``ae_ddpg``, ``td3_supersuit``): 2 env copies (6 slots), the same networks
(``pi=[64, 64]``, ``qf=[64, 64]``), batch 100, replay 100k, learning starts 600 slot steps. AE-DDPG with its defaults
otherwise (Zhang et al.), on ``AsyncEnvPool(make, n_envs=2, n_hosts=1)``; TD3 with SB3's defaults otherwise (one
gradient step per vector step, as the RL Zoo runs TD3 with several envs) on
``concat_vec_envs_v1(pettingzoo_env_to_vec_env_v1(env), 2, num_cpus=1)``.

Discrete actions, A3C against PPO (``a3c``, ``ppo_supersuit``): 4 env copies (12 slots) each. A3C with the entry of
``zoo_configs/a3c.yml`` (2 workers of 2 copies, ``n_steps`` 25, entropy 0.01, learning rate 7e-4); PPO with SB3's
defaults (the RL Zoo's when it has no tuned entry) but ``n_steps=256`` and ``batch_size=256`` for 12 slots, on
``concat_vec_envs_v1(..., 4, num_cpus=1)``.

One torch thread. The model ``learn()`` returns is scored off the clock: the mean return per agent of 20
deterministic episodes (60 slot episodes) on a fresh pool, seeded 1000 + seed. Each run in a fresh process (``--one``).

Without ``--out`` it prints the table only. With ``--out DIR`` it writes ``DIR/results.json`` (every run's steps,
seconds and score, the command, the date, the machine, and the ``"table"`` that :func:`table_of` computes from the
runs) and ``DIR/README.md``; ``python -m sb3_async.benchmark --report DIR --markdown --table script`` prints that
table, and ``--render DIR`` recomputes it from the runs. AE-DDPG against TD3::

    python benchmarks/scripts/pettingzoo_race.py --seeds 0 1 2 --steps 30000 --algos ae_ddpg td3_supersuit

A3C against PPO at one budget of slot steps::

    python benchmarks/scripts/pettingzoo_race.py --algos a3c ppo_supersuit --seeds 0 1 2 --steps 200000

Needs ``pip install "sb3-async[pettingzoo]" "supersuit>=3.11"``.

**Games** (``--game connect_four``): A3C self-play on connect four against sb3-contrib's ``MaskablePPO``, at the
same wall clock. A3C trains from its zoo entry, ``python -m sb3_async.train --algo a3c --env classic/connect_four-v3``
(the pool's games, its 2 workers' policies playing the other seat); the seconds that command takes, start to exit,
are MaskablePPO's budget, from its own process start. MaskablePPO (its defaults, one process) trains on connect four
through a wrapper written after PettingZoo's SB3 action-mask tutorial: each move is a step, from the mover's
observation to the next mover's, rewarded with the mover's cumulative reward. One torch thread per process. Off the
clock: 200 games of each against a random legal player (deterministic moves, 100 per seat), and 200 games head to
head (sampled moves, 100 per seat)::

    python benchmarks/scripts/pettingzoo_race.py --game connect_four --seeds 0 --out benchmarks/results/games_race
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

PROCESS_START = time.perf_counter()

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
        pool = AsyncEnvPool(make, n_envs=2, n_hosts=1)
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
    with AsyncEnvPool(factory, n_envs=2, n_hosts=0) as eval_pool:
        eval_env = eval_pool.as_vec_env()
        eval_env.seed(1000 + seed)
        score, _ = evaluate_policy(model, eval_env, n_eval_episodes=60)
    model.get_env().close()
    return {"algo": algo, "seed": seed, "steps": int(model.num_timesteps), "seconds": train_seconds, "score": float(score)}


GAME_ID = {"connect_four": "classic/connect_four-v3"}


def game_factory(game: str):
    import importlib

    return importlib.import_module(f"pettingzoo.classic.{game}_v3").env


class _MoverWrapper:
    """The other side's setup: PettingZoo's SB3 action-mask tutorial's approach, written here. One AEC game as a
    gymnasium env where each move is a step, whoever moves: the observation is the next mover's, the reward and flags
    the mover's own (its cumulative reward), the mask the next mover's."""

    def __new__(cls, game: str):
        import gymnasium as gym

        class MoverEnv(gym.Env):
            def __init__(self) -> None:
                self.env = game_factory(game)()
                first = self.env.possible_agents[0]
                self.observation_space = self.env.observation_space(first)["observation"]
                self.action_space = self.env.action_space(first)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.env.reset(seed=seed)
                return self.env.observe(self.env.agent_selection)["observation"], {}

            def step(self, action):
                mover = self.env.agent_selection
                self.env.step(int(action))
                observation = self.env.observe(self.env.agent_selection)["observation"]
                env = self.env
                return observation, env._cumulative_rewards[mover], env.terminations[mover], env.truncations[mover], {}

            def action_masks(self):
                return self.env.observe(self.env.agent_selection)["action_mask"].astype(bool)

        return MoverEnv()


def run_game_side(side: str, game: str, seed: int, seconds: float | None, folder: Path, steps: int | None) -> dict:
    """Train one side (in this process) and save it; ``a3c`` runs the zoo's command, ``maskable_ppo`` trains for
    ``seconds`` from this process' start."""
    import torch

    torch.set_num_threads(1)
    if side == "a3c":
        start = time.perf_counter()
        command = [sys.executable, "-m", "sb3_async.train", "--algo", "a3c", "--env", GAME_ID[game]]
        command += ["--seed", str(seed), "--eval-freq", "-1", "-f", str(folder)]
        command += [] if steps is None else ["-n", str(steps)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        from sb3_async import A3C

        name = GAME_ID[game].replace("/", "-")
        model = A3C.load(next(folder.glob(f"a3c/{name}_*/{name}.zip")))
        return {"side": side, "seed": seed, "steps": int(model.num_timesteps), "seconds": seconds}
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    assert seconds is not None
    deadline = PROCESS_START + seconds

    class Deadline(BaseCallback):
        def _on_step(self) -> bool:
            return time.perf_counter() < deadline

    model = MaskablePPO("MlpPolicy", _MoverWrapper(game), seed=seed, device="cpu")
    model.learn(10**9, callback=Deadline())
    model.save(folder / "maskable_ppo.zip")
    return {"side": side, "seed": seed, "steps": int(model.num_timesteps), "seconds": time.perf_counter() - PROCESS_START}


def play_off(game: str, seed: int, folder: Path) -> dict:
    """Each side against a random legal player (200 games, deterministic), then head to head (200, sampled)."""
    import torch
    from sb3_contrib import MaskablePPO

    from sb3_async import A3C
    from sb3_async.games import ModelPlayer, play_games

    torch.set_num_threads(1)
    name = GAME_ID[game].replace("/", "-")
    a3c = A3C.load(next(folder.glob(f"a3c/{name}_*/{name}.zip")))
    ppo = MaskablePPO.load(folder / "maskable_ppo.zip", device="cpu")
    make = game_factory(game)
    counts = {}
    for side, model in (("a3c", a3c), ("maskable_ppo", ppo)):
        counts[f"{side}_vs_random"] = play_games(model, make, 200, "random", deterministic=True, seed=seed).results
    match = play_games(a3c, make, 200, ModelPlayer(ppo, deterministic=False), deterministic=False, seed=seed)
    counts["a3c_vs_maskable_ppo"] = match.results
    return {"seed": seed, "games": {key: {str(seat): c for seat, c in value.items()} for key, value in counts.items()}}


def _rates(results: dict) -> str:
    wins, draws, losses = (sum(counts[i] for counts in results.values()) for i in range(3))
    total = max(1, wins + draws + losses)
    return f"{wins / total:.3f} / {draws / total:.3f} / {losses / total:.3f}"


def game_table_of(record: dict) -> dict:
    """The published table of a games race, from its runs only."""
    rows = []
    for side, label in (("a3c", LABELS["a3c_game"]), ("maskable_ppo", LABELS["maskable_ppo"])):
        runs = [run for run in record["runs"] if run["side"] == side]
        vs_random = {}
        match = {}
        for played in record["games"]:
            for seat, counts in played["games"][f"{side}_vs_random"].items():
                vs_random[f"{played['seed']}/{seat}"] = counts
            for seat, counts in played["games"]["a3c_vs_maskable_ppo"].items():
                # the head-to-head from this side's view: A3C's wins are MaskablePPO's losses
                match[f"{played['seed']}/{seat}"] = counts if side == "a3c" else counts[::-1]
        rows.append(
            [
                label,
                f"{statistics.median(run['seconds'] for run in runs):.0f}",
                f"{statistics.median(run['steps'] for run in runs):,.0f}",
                _rates(vs_random),
                _rates(match),
            ]
        )
    seeds = sorted({run["seed"] for run in record["runs"]})
    notes = (
        "PettingZoo's `connect_four_v3`; setups as in `benchmarks/scripts/pettingzoo_race.py` (`--game`). A3C's "
        "seconds are its zoo command's, start to exit; MaskablePPO trains for as long. Env steps: A3C's count its "
        "learning seat's moves, MaskablePPO's every move. Rates: win / draw / loss over 200 games against a random "
        "legal player (deterministic moves) and 200 head to head (sampled moves), 100 at each seat, seeds "
        f"{', '.join(map(str, seeds))}, one torch thread per process, {record['machine']['cpus']} cores."
    )
    return {
        "title": "Connect four: A3C self-play on the pool against MaskablePPO, the same wall clock",
        "columns": ["player", "train seconds", "env steps", "vs random (W / D / L)", "head to head (W / D / L)"],
        "rows": rows,
        "notes": notes,
    }


def game_race(args: argparse.Namespace) -> None:
    import tempfile

    record = {
        "command": f"python benchmarks/scripts/pettingzoo_race.py --game {args.game} --seeds "
        + " ".join(map(str, args.seeds))
        + (f" --n-timesteps {args.n_timesteps}" if args.n_timesteps else "")
        + (f" --out {args.out}" if args.out else ""),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "runs": [],
        "games": [],
    }
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as folder:
            for side in ("a3c", "maskable_ppo"):  # MaskablePPO's budget is A3C's seconds
                budget = [] if side == "a3c" else ["--seconds", str(record["runs"][-1]["seconds"])]
                budget += [] if args.n_timesteps is None else ["--n-timesteps", str(args.n_timesteps)]
                command = [sys.executable, __file__, "--game", args.game, "--side", side, str(seed), folder, *budget]
                line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                record["runs"].append(json.loads(line))
                print(line, flush=True)
            command = [sys.executable, __file__, "--game", args.game, "--play-off", str(seed), folder]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            record["games"].append(json.loads(line))
            print(line, flush=True)
    spec = game_table_of(record)
    print(" | ".join(spec["columns"]), *(" | ".join(row) for row in spec["rows"]), spec["notes"], sep="\n")
    if args.out:
        write_folder(args.out, record)


LABELS = {
    "a3c_game": "A3C self-play on AsyncEnvPool (zoo entry, 2 workers)",
    "maskable_ppo": "MaskablePPO (sb3-contrib) through the tutorial's wrapper",
    "ae_ddpg": "AE-DDPG on AsyncEnvPool",
    "td3_supersuit": "TD3 (SB3) on SuperSuit",
    "a3c": "A3C, its workers' own copies",
    "ppo_supersuit": "PPO (SB3) on SuperSuit",
}


def command_of(seeds: list[int], steps: int, algos: list[str], steps_for: list[list[str]], out: str | None) -> str:
    """The command that reproduces a race of these arguments."""
    words = ["python benchmarks/scripts/pettingzoo_race.py", f"--seeds {' '.join(map(str, seeds))}", f"--steps {steps}"]
    words += [f"--algos {' '.join(algos)}"] if list(algos) != list(ALGOS) else []
    words += [f"--steps-for {algo} {budget}" for algo, budget in steps_for]
    return " ".join(words + ([f"--out {out}"] if out else []))


def table_of(record: dict) -> dict:
    """The published table of a race, from its runs only (``record``: what ``results.json`` holds): per algorithm,
    the slot steps, the median training seconds, each seed's score and the median score."""
    rows = []
    for algo in dict.fromkeys(run["algo"] for run in record["runs"]):
        mine = sorted((run for run in record["runs"] if run["algo"] == algo), key=lambda run: run["seed"])
        rows.append(
            [
                LABELS.get(algo, algo),
                f"{statistics.median(run['steps'] for run in mine):,.0f}",
                f"{statistics.median(run['seconds'] for run in mine):.0f}",
                ", ".join(f"{run['score']:.1f}" for run in mine),
                f"{statistics.median(run['score'] for run in mine):.1f}",
            ]
        )
    seeds = sorted({run["seed"] for run in record["runs"]})
    notes = (
        "MPE's `simple_spread_v3` (3 agents, `max_cycles=25`), one policy for every agent; setups as in "
        "`benchmarks/scripts/pettingzoo_race.py`. Score: the mean return per agent of 60 deterministic slot episodes "
        f"of the model `learn()` returned (higher is better), seeds {', '.join(map(str, seeds))}, each run in a fresh "
        f"process, one torch thread, {record['machine']['cpus']} cores."
    )
    return {
        "title": "Learning on simple_spread_v3: ours on the pool against SB3 through SuperSuit",
        "columns": ["algorithm", "slot steps", "train seconds (median)", "score per seed", "median score"],
        "rows": rows,
        "notes": notes,
    }


def write_folder(out: Path, record: dict) -> None:
    """``results.json`` (the runs and their table) and ``README.md`` (the command and how to print the table)."""
    games = "games" in record
    record = {**record, "table": game_table_of(record) if games else table_of(record)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(record, indent=1))
    (out / "README.md").write_text(
        f"# {record['table']['title']}\n\n```\n{record['command']}\n```\n\n"
        f"`python -m sb3_async.benchmark --report {out} --markdown --table script` prints the table.\n"
    )


def machine() -> dict:
    import platform
    from importlib import metadata

    versions = {}
    for package in ("stable_baselines3", "torch", "pettingzoo", "mpe2", "supersuit"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return {"arch": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(), "versions": versions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--out", type=Path, default=None, help="write results.json and README.md here (default: print)")
    parser.add_argument("--render", type=Path, metavar="DIR", help="recompute DIR's table from the runs of DIR/results.json")
    parser.add_argument("--algos", nargs="+", choices=ALGOS, default=list(ALGOS))
    parser.add_argument(
        "--steps-for", nargs=2, action="append", default=[], metavar=("ALGO", "STEPS"), help="another budget for ALGO"
    )
    parser.add_argument("--one", nargs=2, metavar=("ALGO", "SEED"))
    parser.add_argument("--game", choices=tuple(GAME_ID), help="race on this game instead (see the module's notes)")
    parser.add_argument("--side", nargs=3, metavar=("SIDE", "SEED", "DIR"))
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--play-off", nargs=2, metavar=("SEED", "DIR"))
    parser.add_argument("--n-timesteps", type=int, default=None, help="games: A3C's steps instead of its entry's")
    args = parser.parse_args()
    if args.game and args.side:
        side, seed, folder = args.side
        print(json.dumps(run_game_side(side, args.game, int(seed), args.seconds, Path(folder), args.n_timesteps)))
        return
    if args.game and args.play_off:
        print(json.dumps(play_off(args.game, int(args.play_off[0]), Path(args.play_off[1]))))
        return
    if args.game and not args.render:
        game_race(args)
        return
    if args.render:
        write_folder(args.render, json.loads((args.render / "results.json").read_text()))
        return
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.steps)))
        return
    budgets = {algo: args.steps for algo in args.algos} | {algo: int(steps) for algo, steps in args.steps_for}
    record = {
        "command": command_of(args.seeds, args.steps, args.algos, args.steps_for, args.out and str(args.out)),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "budgets": budgets,
        "runs": [],
    }
    for seed in args.seeds:
        for algo in args.algos:  # interleaved, each in a fresh process
            command = [sys.executable, __file__, "--one", algo, str(seed), "--steps", str(budgets[algo])]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            record["runs"].append(json.loads(line))
            print(line, flush=True)
    spec = table_of(record)
    print(" | ".join(spec["columns"]), *(" | ".join(row) for row in spec["rows"]), spec["notes"], sep="\n")
    if args.out:
        write_folder(args.out, record)


if __name__ == "__main__":
    main()
