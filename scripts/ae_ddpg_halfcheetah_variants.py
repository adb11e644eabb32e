"""AE-DDPG on HalfCheetah-v5 in a short wall-clock race: variants of the zoo entry (issue 14).

The zoo entry is the paper's MuJoCo setup (Adam 1e-4, tau 1e-3: tuned for 12M-step runs); in a 540 s race it scored
191 where TD3 (the zoo's lr 1e-3) scored 2535 (docs/benchmarks.md). The variants take the learning rate and tau
that the Pendulum-v1 entry takes from SB3's TD3/DDPG (1e-3, 0.005), and that with the zoo's Gaussian noise (0.1).
Registers an ``ae_ddpg_halfcheetah_variants`` suite (the AE-DDPG variants and TD3's zoo entry, evaluation every
10 000 env steps, 300 s of training clock per run) and runs it with the benchmark's command line.

Usage: python scripts/ae_ddpg_halfcheetah_variants.py --suite ae_ddpg_halfcheetah_variants --seeds 1 --out DIR --no-progress
"""

import sys

from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.suites import Suite, Variant, register_suite

FAST = {"learning_rate": 1e-3, "tau": 0.005}


def variants(entry):
    if entry.name != "ae_ddpg":
        return [Variant()]
    return [
        Variant("lr 1e-3, tau 0.005", FAST, {"change": "lr 1e-3, tau 0.005"}),
        Variant(
            "lr 1e-3, tau 0.005, normal 0.1",
            {**FAST, "noise_type": "normal", "noise_std": 0.1},
            {"change": "lr 1e-3, tau 0.005, normal 0.1"},
        ),
    ]


register_suite(
    Suite(
        "ae_ddpg_halfcheetah_variants",
        "AE-DDPG HalfCheetah-v5 zoo-entry variants in a 300 s race",
        "race",
        ("HalfCheetah-v5",),
        eval_interval=10_000,
        budget_seconds=300,
        algos=("ae_ddpg", "td3"),
        include_peers=False,
        variants=variants,
    )
)
sys.exit(main(sys.argv[1:]))
