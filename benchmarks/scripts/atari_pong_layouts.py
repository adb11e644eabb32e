"""A3C on PongNoFrameskip-v4 with a fixed wall-clock budget per run: the best layout for 2 cores (2 workers x 8 envs,
each worker batching its envs' inference) and the paper's 16 workers x 1 env, against SB3's A2C with the zoo's atari
settings (the ``atari`` measurement of docs/benchmarks.md). Registers an ``atari_layouts`` suite (the ``atari``
suite's protocol: evaluation every 250k env steps, 10 deterministic episodes, off the clock) and runs it with the
benchmark's command line; ``--algos a3c,a2c`` and the variants below choose the runs.

Usage: python benchmarks/scripts/atari_pong_layouts.py --suite atari_layouts --seeds 1 --budget-seconds 1800 \
           --out DIR --no-progress [--layouts 2x8,16x1] [--params learning_rate:"'lin_1e-3'" n_timesteps:5000000]

``--params`` overrides A3C's zoo entry in every layout (the zoo's ``-params`` format and parser: ``key:value``
pairs, each value a Python expression); each run's record holds them.
"""

import argparse
import sys

from rl_zoo3.utils import StoreDict

from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.suites import Suite, Variant, get_suite, register_suite

LAYOUTS = ["2x8", "16x1"]
if "--layouts" in sys.argv:
    at = sys.argv.index("--layouts")
    LAYOUTS = sys.argv[at + 1].split(",")
    del sys.argv[at : at + 2]
# the RL Zoo's own -params parser (rl_zoo3.utils.StoreDict): key:value pairs, each value a Python expression
params_parser = argparse.ArgumentParser(add_help=False)
params_parser.add_argument("--params", nargs="+", action=StoreDict, default={})
try:
    known, sys.argv[1:] = params_parser.parse_known_args(sys.argv[1:])
except (ValueError, SyntaxError, NameError) as error:  # StoreDict evaluates each value as Python
    params_parser.error(f"--params: expected key:value pairs with Python values, e.g. n_timesteps:5000000 ({error!r})")
OVERRIDES: dict[str, object] = known.params


def variants(entry):
    if entry.name != "a3c":
        return [Variant()]
    chosen = []
    for layout in LAYOUTS:
        workers, per_worker = (int(n) for n in layout.split("x"))
        params = {"n_envs": workers * per_worker, "n_workers": workers, "n_envs_per_worker": per_worker, **OVERRIDES}
        label = f"{workers} workers x {per_worker} envs" + "".join(f", {k} {v}" for k, v in OVERRIDES.items())
        chosen.append(Variant(label, params, {"layout": layout, **OVERRIDES}))
    return chosen


atari = get_suite("atari")
register_suite(
    Suite(
        "atari_layouts",
        "PongNoFrameskip-v4: A3C in two worker layouts against A2C, a fixed wall-clock budget per run",
        "race",
        atari.envs,
        eval_interval=atari.eval_interval,
        torch_threads=atari.torch_threads,
        algos=("a3c", "a2c"),
        include_peers=False,
        variants=variants,
    )
)
sys.exit(main(sys.argv[1:]))
