"""The classic games' zoo entries, trained from the command line as a user trains them, then played against a random
legal player (and, with a league, against every snapshot the league kept).

For each game: ``python -m sb3_async.train --algo a3c --env <id> --seed <seed>`` with the entry of
``zoo_configs/a3c.yml`` (the zoo's evaluations against a random legal player every ``eval_freq`` env steps, masks
applied, deterministic moves), timed from start to exit. Off the clock, the saved model (the one ``learn()`` returned)
plays ``n_games`` against a random legal player, seats alternating, deterministic moves
(:func:`sb3_async.games.play_games`): win / draw / loss rates and the mean return per game with its standard error
(poker: chips won per hand, PettingZoo's reward of raised chips / 2). With the league, the model also plays 20 games
(sampled moves) against each snapshot its league kept (:func:`sb3_async.games.league_table`).

- ``go``: ``classic/go-v5`` on a 9x9 board (komi 7.5), 200 games;
- ``texas_holdem``: ``classic/texas_holdem-v4`` (limit), 2,000 hands;
- ``connect_four_league``: ``classic/connect_four-v3`` with ``--hyperparams opponent:"'league'"`` (the default
  ``OpponentPool``), evaluations every 300k env steps.

One command per game, each run in its own process; one torch thread a process::

    python benchmarks/scripts/classic_games.py --games texas_holdem go connect_four_league \
        --out benchmarks/results/games_race/classic_games.json

``--out DIR`` writes ``DIR/results.json`` (every run's command, seconds, steps, evaluations and games, the date,
the machine and the ``"table"`` computed from them) and ``DIR/README.md``; ``--out FILE.json`` writes that file only,
beside another table's folder. The runs of the games not named in ``--games`` stay there (one row per game, each run
dated; results of another host are refused). ``python -m sb3_async.benchmark --report DIR --markdown --table script``
(or ``--report FILE.json``) prints the table, and ``--render DIR`` (or ``FILE.json``) recomputes it from the runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

#: each game: its zoo id, its arguments for the AEC factory, the games played off the clock, the evaluations' period
#: (env steps) and episodes, and extra ``--hyperparams``
GAMES = {
    "go": {"env": "classic/go-v5", "module": "go_v5", "kwargs": {"board_size": 9}, "games": 200, "eval": (200_000, 100)},
    "texas_holdem": {"env": "classic/texas_holdem-v4", "module": "texas_holdem_v4", "games": 2000, "eval": (50_000, 200)},
    "connect_four_league": {
        "env": "classic/connect_four-v3",
        "module": "connect_four_v3",
        "games": 200,
        "eval": (300_000, 200),
        "hyperparams": ["opponent:'league'"],
        "league_games": 20,
    },
}
LABELS = {"go": "Go 9x9", "texas_holdem": "Texas hold'em (limit)", "connect_four_league": "Connect four, league"}


def factory(game: str):
    import functools
    import importlib

    spec = GAMES[game]
    return functools.partial(importlib.import_module(f"pettingzoo.classic.{spec['module']}").env, **spec.get("kwargs", {}))


def _counts(results) -> dict:
    return {
        "results": {str(seat): counts for seat, counts in results.results.items()},
        "rewards": {str(seat): rewards for seat, rewards in results.rewards.items()},
    }


def train_and_play(game: str, seed: int, folder: Path) -> dict:
    """Train the entry from the CLI (timed), then play the saved model (off the clock)."""
    import torch

    torch.set_num_threads(1)
    spec = GAMES[game]
    eval_freq, eval_episodes = spec["eval"]
    command = ["python", "-m", "sb3_async.train", "--algo", "a3c", "--env", spec["env"], "--seed", str(seed)]
    command += ["--eval-freq", str(eval_freq), "--eval-episodes", str(eval_episodes)]
    command += ["--hyperparams", *spec["hyperparams"]] if "hyperparams" in spec else []
    start = time.perf_counter()
    subprocess.run([sys.executable, *command[1:], "-f", str(folder)], check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start

    from sb3_async import A3C
    from sb3_async.games import league_table, play_games

    name = spec["env"].replace("/", "-")
    run = next(folder.glob(f"a3c/{name}_*"))
    model = A3C.load(run / f"{name}.zip")
    evaluations = np.load(run / "evaluations.npz")
    history = [
        {"steps": int(steps), "win_rate": float(np.mean(np.asarray(rewards) > 0)), "mean": float(np.mean(rewards))}
        for steps, rewards in zip(evaluations["timesteps"], evaluations["results"], strict=True)
    ]
    record = {
        "game": game,
        "seed": seed,
        "command": " ".join(command),
        "seconds": seconds,
        "steps": int(model.num_timesteps),
        "evaluations": history,
        "vs_random": _counts(play_games(model, factory(game), spec["games"], "random", deterministic=True, seed=seed)),
    }
    if "league_games" in spec:
        table = league_table(model, factory(game), spec["league_games"], seed=seed)
        record["vs_snapshots"] = {
            name: {"rating": model.league.ratings[name], **_counts(results)} for name, results in table.items()
        }
    return record


def _rates(results: dict) -> tuple[float, float, float]:
    counts = np.sum(list(results.values()), axis=0)
    return tuple(float(c) / max(1, int(counts.sum())) for c in counts)  # type: ignore[return-value]


def _reward(rewards: dict) -> str:
    returns = np.concatenate([np.asarray(r, dtype=float) for r in rewards.values()])
    return f"{returns.mean():+.3f} ± {returns.std(ddof=1) / np.sqrt(returns.size):.3f}"


def table_of(record: dict) -> dict:
    """The published table, from the runs only."""
    rows = []
    for run in record["runs"]:
        win, draw, loss = _rates(run["vs_random"]["results"])
        reached = [e for e in run["evaluations"] if e["win_rate"] >= 0.9]
        after = [e["win_rate"] for e in run["evaluations"] if reached and e["steps"] >= reached[0]["steps"]]
        curve = ", ".join(f"{e['win_rate']:.2f}" for e in run["evaluations"])
        snapshots = run.get("vs_snapshots")
        if snapshots:
            worst = min(_rates(s["results"])[0] for s in snapshots.values())
            league = f"{len(snapshots)} snapshots, lowest win rate {worst:.2f}"
        else:
            league = "-"
        rows.append(
            [
                LABELS[run["game"]],
                f"{run['seconds']:.0f}",
                f"{run['steps']:,}",
                f"{win:.3f} / {draw:.3f} / {loss:.3f}",
                _reward(run["vs_random"]["rewards"]),
                curve + (f" (lowest after reaching 0.9: {min(after):.2f})" if after else ""),
                league,
            ]
        )
    games = {run["game"]: GAMES[run["game"]]["games"] for run in record["runs"]}
    notes = (
        "A3C's zoo entries (`zoo_configs/a3c.yml`) trained by `python -m sb3_async.train` (the command of each run "
        "in results.json), seconds from start to exit, seed "
        + ", ".join(sorted({str(run["seed"]) for run in record["runs"]}))
        + ". Against random: the returned model's games against a random legal player, seats alternating, "
        "deterministic moves ("
        + ", ".join(f"{LABELS[g]} {n:,}" for g, n in games.items())
        + "); the mean return per game with its standard error (hold'em: chips won per hand, PettingZoo's reward). "
        "Evaluations: the zoo's, against a random legal player (win rates). League: the returned model against each "
        "kept snapshot, 20 games each, sampled moves. One host ("
        + f"{record['machine']['cpu_model']}, {record['machine']['usable_cpus']} cores, one torch thread a process), "
        + "runs of "
        + ", ".join(sorted({run.get("created", record["created"])[:10] for run in record["runs"]}))
        + "."
    )
    return {
        "title": "The classic games' zoo entries against a random player",
        "columns": [
            "game",
            "train seconds",
            "env steps",
            "vs random (W / D / L)",
            "mean return ± s.e.",
            "evaluations (win rate)",
            "against the league",
        ],
        "rows": rows,
        "notes": notes,
    }


def machine() -> dict:
    from sb3_async.benchmark.runner import machine_info

    return machine_info()


#: what says two folders were measured on the same kind of host
HOST = ("cpu_model", "cpu_id", "usable_cpus")


def results_file(out: Path) -> Path:
    """``out`` itself where it ends in ``.json`` (stored beside another table's results), else ``out/results.json``."""
    return out if out.suffix == ".json" else out / "results.json"


def write_folder(out: Path, record: dict) -> None:
    record = {**record, "table": table_of(record)}
    path = results_file(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1))
    if out.suffix != ".json":
        (out / "README.md").write_text(
            f"# {record['table']['title']}\n\n```\n{record['command']}\n```\n\n"
            f"`python -m sb3_async.benchmark --report {out} --markdown --table script` prints the table.\n"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", choices=tuple(GAMES), default=list(GAMES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write results.json and README.md here (default: print)")
    parser.add_argument("--render", type=Path, metavar="DIR", help="recompute DIR's table from DIR/results.json")
    parser.add_argument("--one", nargs=2, metavar=("GAME", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render:
        write_folder(args.render, json.loads(results_file(args.render).read_text()))
        return
    if args.one:
        print(json.dumps(train_and_play(args.one[0], args.seed, Path(args.one[1]))))
        return
    command = f"python benchmarks/scripts/classic_games.py --games {' '.join(args.games)} --seed {args.seed}"
    record: dict = {
        "command": command + (f" --out {args.out}" if args.out else ""),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "runs": [],
    }
    if args.out and results_file(args.out).exists():  # the other games' runs stay, each with its own date
        kept = json.loads(results_file(args.out).read_text())
        if any(kept["machine"].get(key) != record["machine"][key] for key in HOST):
            raise SystemExit(f"{args.out} was measured on another host ({kept['machine']}): give another --out")
        record["runs"] = [run for run in kept["runs"] if run["game"] not in args.games]
    for game in args.games:
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, __file__, "--one", game, folder, "--seed", str(args.seed)]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        run = {**json.loads(line), "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        record["runs"].append(run)
        print(json.dumps({k: v for k, v in run.items() if k not in ("vs_random", "vs_snapshots")}), flush=True)
        if args.out:  # each game as it ends: a later failure keeps the games already played
            write_folder(args.out, record)
    spec = table_of(record)
    print(" | ".join(spec["columns"]), *(" | ".join(row) for row in spec["rows"]), spec["notes"], sep="\n")


if __name__ == "__main__":
    main()
