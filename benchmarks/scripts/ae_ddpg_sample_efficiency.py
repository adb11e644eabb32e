"""AE-DDPG against DDPG on Pendulum-v1 at equal warm-up: env steps to -200 (the paper's claim: 2-4x DDPG's sample efficiency).

The ``pendulum`` suite compares each algorithm with its own config, and the configs differ in ``learning_starts``
(AE-DDPG 1000, the zoo's DDPG 10 000): most of the gap in env steps it measured is that warm-up. This suite runs both
with the same warm-up, 1000 and 10 000 random steps, evaluating every 1000 env steps (10 episodes), so env steps to
-200 compare the learning itself. Registers an ``ae_ddpg_sample_efficiency`` suite and runs it with the benchmark's
command line.

A second suite, ``ae_ddpg_halfcheetah_sample_efficiency``, asks the same on HalfCheetah-v5 (the paper's 2-4x are on
MuJoCo tasks): AE-DDPG's HalfCheetah-v5 entry and the zoo's DDPG HalfCheetah entry, both with their 10 000 random
warm-up steps, env steps to a 3000 evaluation mean, evaluating every 10 000 env steps.

A third, ``ae_ddpg_halfcheetah_updates``, spends AE-DDPG's faster collection on more updates per transition
(``updates_per_transition`` 2 and 4; the paper fixes no ratio, §IV-B) with the same protocol as the second, against
DDPG's zoo entry (its one update per transition) when ``--algos ae_ddpg,ddpg`` names it.

Usage: python benchmarks/scripts/ae_ddpg_sample_efficiency.py --suite ae_ddpg_sample_efficiency --seeds 3 \
           --out DIR --no-progress
       python benchmarks/scripts/ae_ddpg_sample_efficiency.py --suite ae_ddpg_halfcheetah_sample_efficiency --seeds 3 \
           --budget-seconds 700 --out DIR --no-progress
       python benchmarks/scripts/ae_ddpg_sample_efficiency.py --suite ae_ddpg_halfcheetah_updates --seeds 1 \
           --budget-seconds 480 --out DIR --no-progress
       AE_DDPG_UPDATES=4 python benchmarks/scripts/ae_ddpg_sample_efficiency.py --suite ae_ddpg_halfcheetah_updates --seeds 2 \
           --first-seed 1 --budget-seconds 600 --out DIR --no-progress
"""

import os
import sys

from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.suites import Suite, Variant, register_suite


def variants(entry):
    return [Variant(f"learning_starts {n}", {"learning_starts": n}, {"learning_starts": n}) for n in (1000, 10_000)]


register_suite(
    Suite(
        "ae_ddpg_sample_efficiency",
        "AE-DDPG vs DDPG on Pendulum-v1 with equal learning_starts, evaluation every 1000 env steps",
        "race",
        ("Pendulum-v1",),
        eval_interval=1_000,
        budget_seconds=300,
        algos=("ae_ddpg", "ddpg"),
        include_peers=False,
        variants=variants,
    )
)
register_suite(
    Suite(
        "ae_ddpg_halfcheetah_sample_efficiency",
        "AE-DDPG vs DDPG on HalfCheetah-v5 (10 000 warm-up steps each), evaluation every 10 000 env steps",
        "race",
        ("HalfCheetah-v5",),
        eval_interval=10_000,
        budget_seconds=700,
        algos=("ae_ddpg", "ddpg"),
        include_peers=False,
    )
)


def update_ratios(entry):
    if entry.name != "ae_ddpg":
        return [Variant()]
    ratios = [float(k) for k in os.environ.get("AE_DDPG_UPDATES", "2,4").split(",")]  # e.g. AE_DDPG_UPDATES=4
    return [
        Variant(f"{k:g} updates per transition", {"updates_per_transition": k}, {"updates_per_transition": k}) for k in ratios
    ]


register_suite(
    Suite(
        "ae_ddpg_halfcheetah_updates",
        "AE-DDPG on HalfCheetah-v5, 2 and 4 updates per transition (10 000 warm-up steps), evaluation every 10 000 env steps",
        "race",
        ("HalfCheetah-v5",),
        eval_interval=10_000,
        budget_seconds=480,
        algos=("ae_ddpg",),
        include_peers=False,
        variants=update_ratios,
    )
)
sys.exit(main(sys.argv[1:]))
