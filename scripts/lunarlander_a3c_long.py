"""A3C on LunarLander-v3 with its zoo entry run for 1e6 steps instead of 2e5, through the benchmark protocol.

Usage: python scripts/lunarlander_a3c_long.py --suite lunarlander_a3c_long --seeds 3 --out DIR --no-progress
(results of 2026-11-24: benchmarks/results/lunarlander_a3c_1e6/)
"""

import sys

from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.suites import Suite, Variant, register_suite


def variants(entry):
    return [Variant("1e6 steps", {"n_timesteps": 1_000_000}, {"change": "1e6 steps"})] if entry.name == "a3c" else []


register_suite(
    Suite(
        "lunarlander_a3c_long",
        "A3C LunarLander-v3, 1e6 steps",
        "race",
        ("LunarLander-v3",),
        eval_interval=20_000,
        budget_seconds=300,
        algos=("a3c",),
        include_peers=False,
        variants=variants,
    )
)
sys.exit(main(sys.argv[1:]))
