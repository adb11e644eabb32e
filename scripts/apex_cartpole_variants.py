"""Ape-X DQN on CartPole-v1: one-change variants of the zoo entry, through the benchmark tool's protocol (issue 13).

The zoo entry ([256, 256], replay_ratio 8) runs at the learner's pace (~140 batches/s on the core the actors leave
it): smaller networks make each learner batch cheaper, so more of them fit in the same seconds. Registers an
``apex_cartpole_variants`` suite (Ape-X DQN only, evaluation every 2000 env steps, 60 s per run) and runs it with
the benchmark's command line.

Usage: python scripts/apex_cartpole_variants.py --suite apex_cartpole_variants --seeds 3 --out DIR --no-progress
"""

import sys

from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.suites import Suite, Variant, register_suite

SMALL = "dict(net_arch=[64, 64], optimizer_class=th.optim.Adam)"


def variants(entry):
    if entry.name != "apex_dqn":
        return [Variant()]
    return [
        Variant(axes={"change": "none"}),
        Variant("net 64x64", {"policy_kwargs": SMALL}, {"change": "net 64x64"}),
        Variant("net 64x64, ratio 16", {"policy_kwargs": SMALL, "replay_ratio": 16}, {"change": "net 64x64, ratio 16"}),
        Variant(
            "net 64x64, ratio 16, lr 2.3e-3",
            {"policy_kwargs": SMALL, "replay_ratio": 16, "learning_rate": 2.3e-3},
            {"change": "net 64x64, ratio 16, lr 2.3e-3"},
        ),
    ]


register_suite(
    Suite(
        "apex_cartpole_variants",
        "Ape-X DQN CartPole-v1 zoo-entry variants",
        "race",
        ("CartPole-v1",),
        eval_interval=2_000,
        budget_seconds=60,
        algos=("apex_dqn",),
        include_peers=False,
        variants=variants,
    )
)
sys.exit(main(sys.argv[1:]))
