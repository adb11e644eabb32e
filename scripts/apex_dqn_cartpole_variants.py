"""Ape-X DQN on CartPole-v1: one- and two-change variants of the zoo entry, through the benchmark tool's protocol
(issue 13: the entry took 1.66x DQN's wall clock to 475; the goal is 0.2x).

The measured bottleneck is the learner's gradient steps (15 ms per batch of 64 with [256, 256]; docs/benchmarks.md),
so the variants try a smaller network (more batches per second), more batches per transition, and a faster target
copy. Registers an ``apex_dqn_cartpole_variants`` suite (Ape-X DQN only, evaluation every 10k steps as the
``cartpole`` suite, 120 s per run) and runs it with the benchmark's command line.

Usage: python scripts/apex_dqn_cartpole_variants.py --suite apex_dqn_cartpole_variants --seeds 2 --out DIR --no-progress
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
            "net 64x64, target 100",
            {"policy_kwargs": SMALL, "target_update_interval": 100},
            {"change": "net 64x64, target 100"},
        ),
        Variant(
            "net 64x64, lr 2.3e-3",
            {"policy_kwargs": SMALL, "learning_rate": 2.3e-3},
            {"change": "net 64x64, lr 2.3e-3"},
        ),
    ]


register_suite(
    Suite(
        "apex_dqn_cartpole_variants",
        "Ape-X DQN CartPole-v1 zoo-entry variants",
        "race",
        ("CartPole-v1",),
        eval_interval=10_000,
        budget_seconds=120,
        algos=("apex_dqn",),
        include_peers=False,
        variants=variants,
    )
)
sys.exit(main(sys.argv[1:]))
