"""The benchmark's named suites: ``python -m sb3_async.benchmark --list`` shows them.

What a suite is, and the runs it makes, is :mod:`sb3_async.benchmark.plan` (its names are importable from here too);
this module registers the built-in suites with :func:`register_suite`, one call each. A new suite joins the same way,
from here or from any module imported before the benchmark runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sb3_async.benchmark.plan import (
    _SUITES,  # noqa: F401  (the table itself: tests restore it through this module)
    KINDS,
    REPO_ROOT,
    RunSpec,
    Suite,
    Variant,
    default_variants,
    get_suite,
    list_suites,
    peer_python,
    plan_runs,
    register_suite,
    select_algorithms,
)
from sb3_async.benchmark.registry import PONG, AlgorithmEntry

__all__ = [
    "KINDS",
    "PONG_LAYOUT",
    "REPO_ROOT",
    "SCALING_WORKERS",
    "SWEEP_LEARNING_RATES",
    "UPDATE_RATIOS",
    "RunSpec",
    "Suite",
    "Variant",
    "ae_ddpg_ablation_variants",
    "default_variants",
    "get_suite",
    "layout_variants",
    "learning_starts_variants",
    "list_suites",
    "memory_variants",
    "optimizer_variants",
    "peer_python",
    "plan_runs",
    "register_suite",
    "scaling_variants",
    "select_algorithms",
    "update_ratio_variants",
]

# --- Built-in suites ---------------------------------------------------------------------------------------------------

#: Worker counts of the ``scaling`` suite (the paper's Table 2 goes 1, 2, 4, 8, 16 threads on 16 cores).
SCALING_WORKERS = (1, 2, 4)
#: Learning rates of the ``optimizers`` suite: log-spaced over the paper's LogUniform(1e-4, 1e-2) range.
SWEEP_LEARNING_RATES = tuple(float(f"{lr:.3g}") for lr in np.logspace(-4, -2, 7))


def scaling_variants(entry: AlgorithmEntry) -> list[Variant]:
    """Ours with 1, 2 and 4 workers, each with the config's envs per worker (so more workers step more envs, as
    the paper's threads each have their own env)."""
    if not entry.is_ours:
        return []
    return [Variant(f"{n} worker{'s' if n > 1 else ''}", {"n_workers": n}, {"n_workers": n}) for n in SCALING_WORKERS]


def optimizer_variants(entry: AlgorithmEntry) -> list[Variant]:
    """Each optimizer the algorithm accepts at each learning rate of :data:`SWEEP_LEARNING_RATES`, annealed linearly
    to 0 as in the paper; interleaved by learning rate."""
    return [
        Variant(
            f"{opt} lr={lr:.3g}", {"optimizer": opt, "learning_rate": f"lin_{lr!r}"}, {"optimizer": opt, "learning_rate": lr}
        )
        for lr in SWEEP_LEARNING_RATES
        for opt in entry.optimizers
    ]


def memory_variants(entry: AlgorithmEntry) -> list[Variant]:
    """The peers and A3C-LSTM as configured, plus, for contrast, the feed-forward A3C with the same settings (the
    zoo entry's MLP without its LSTM) for 100k steps, RecurrentPPO's ``n_timesteps`` in the zoo."""
    if not entry.is_ours:
        return [Variant()]
    feed_forward = {
        "policy": "MlpPolicy",
        "policy_kwargs": "dict(ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[64], vf=[64]))",
        "n_timesteps": 100_000,
    }
    return [Variant(), Variant("feed-forward", feed_forward, {"policy": "MlpPolicy"})]


register_suite(
    Suite(
        "smoke",
        "CartPole-v1, A3C against A2C, short runs: checks the whole pipeline (CI)",
        "race",
        ("CartPole-v1",),
        seeds=1,
        eval_interval=10_000,
        budget_seconds=20,
        algos=("a3c",),
    )
)
register_suite(
    Suite(
        "cartpole",
        "CartPole-v1, time to a 475 evaluation mean, ours against their SB3 peers",
        "race",
        ("CartPole-v1",),
        seeds=3,
        eval_interval=10_000,
        budget_seconds=120,
    )
)
register_suite(
    Suite(
        "lunarlander",
        "LunarLander-v3, time to a 200 evaluation mean, ours against their SB3 peers (needs box2d)",
        "race",
        ("LunarLander-v3",),
        eval_interval=20_000,
        budget_seconds=1200,
    )
)
register_suite(
    Suite(
        "pendulum",
        "Pendulum-v1, time to a -200 evaluation mean, ours against their SB3 peers",
        "race",
        ("Pendulum-v1",),
        eval_interval=2_000,  # the zoo's TD3 runs 20k steps: one evaluation per 20k measured nothing
        budget_seconds=1200,
    )
)
register_suite(
    Suite(
        "mujoco",
        "HalfCheetah-v5, Hopper-v5 and Walker2d-v5, time to a 3000 evaluation mean, ours against their peers (needs "
        "mujoco; hours)",
        "race",
        ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"),
        eval_interval=50_000,
    )
)
register_suite(
    Suite(
        "atari",
        "PongNoFrameskip-v4, throughput, learning curve and time to 18, ours against their SB3 peers (needs ale-py; days)",
        "race",
        ("PongNoFrameskip-v4",),
        eval_interval=250_000,
        torch_threads=None,  # convolutions: SB3's A2C uses every core
    )
)

#: A3C's worker layout in the ``pong`` suite, workers x envs per worker, that of its zoo entry: on 2 cores, one worker
#: per core batching the inference of its 8 envs steps Pong fastest (the paper: 16 workers x 1 env).
PONG_LAYOUT = (2, 8)


def layout_variants(layout: tuple[int, int]) -> Callable[[AlgorithmEntry], list[Variant]]:
    """A3C in the ``(workers, envs per worker)`` layout, every other algorithm as configured."""
    workers, per_worker = layout

    def variants(entry: AlgorithmEntry) -> list[Variant]:
        if entry.name != "a3c":
            return [Variant()]
        params = {"n_envs": workers * per_worker, "n_workers": workers, "n_envs_per_worker": per_worker}
        return [Variant(f"{workers} workers x {per_worker} envs", params, {"layout": f"{workers}x{per_worker}"})]

    return variants


register_suite(
    Suite(
        "pong",
        "PongNoFrameskip-v4, time to 18: A3C's zoo entry in 2 workers x 8 envs against Sample Factory's APPO and "
        "TorchRL's PPO when --peers-from benchmarks/peers registers them (needs ale-py and the peers' venvs; hours)",
        "race",
        (PONG,),
        eval_interval=250_000,  # the atari suite's spacing: an evaluation of 10 Pong games takes minutes
        # Sample Factory's APPO steps Pong an order slower than A3C and reaches 18 in an order fewer env steps (the
        # published table's env-steps ratio): 25k keeps its evaluations, like A3C's, minutes of training apart
        eval_intervals={"sf_appo": 25_000},
        torch_threads=None,
        algos=("a3c",),
        include_peers=False,  # SB3's A2C only when named (--algos a3c,a2c): the race is against the fastest peers
        external_peers=True,
        variants=layout_variants(PONG_LAYOUT),
    )
)
register_suite(
    Suite(
        "scaling",
        "CartPole-v1, ours with 1, 2 and 4 workers, 200k steps each: env steps/s and time to 475 (the paper's Table 2 shape)",
        "scaling",
        ("CartPole-v1",),
        seeds=2,
        eval_interval=10_000,
        max_steps=200_000,
        budget_seconds=90,
        stop_at_threshold=False,  # throughput needs a long enough run; time to threshold is still measured
        evaluate_after_threshold=False,
        include_peers=False,
        variants=scaling_variants,
    )
)
register_suite(
    Suite(
        "optimizers",
        "CartPole-v1, final score after 120k steps over 7 learning rates in [1e-4, 1e-2] for shared RMSProp, "
        "per-worker RMSProp and momentum SGD (the paper's Figure S1 shape)",
        "sweep",
        ("CartPole-v1",),
        seeds=1,
        eval_interval=40_000,
        max_steps=120_000,
        budget_seconds=60,
        stop_at_threshold=False,
        include_peers=False,
        variants=optimizer_variants,
    )
)
register_suite(
    Suite(
        "final_policy",
        "CartPole-v1, the policy a user ends with: the model learn(n_timesteps) returns (20 deterministic episodes) "
        "next to the best of 10 evaluations, ours against their SB3 peers, 5 seeds",
        "final",
        ("CartPole-v1",),
        seeds=5,
        stop_at_threshold=False,  # the whole n_timesteps of the config: the policy learn() returns is the point
        evals_per_run=10,
        final_eval_episodes=20,
        algos=("async_one_step_q", "async_sarsa", "async_n_step_q"),
    )
)


#: The zoo evaluates a string ``replay_buffer_class`` (``eval``): these expressions name the classes from anywhere.
_REPLAY_CLASSES = {
    "uniform replay": "__import__('stable_baselines3').common.buffers.ReplayBuffer",
    "prioritized replay": "__import__('sb3_async').PrioritizedReplayBuffer",
}


def ae_ddpg_ablation_variants(entry: AlgorithmEntry) -> list[Variant]:
    """AE-DDPG's §V-C ablations, one change each from the zoo config (episodic replay, random-walk noise, its n_envs):
    uniform and prioritized replay (Fig. 7), Gaussian noise sigma 0.15 and OU noise sigma 0.2 (the paper's tuned values,
    Fig. 8), and 1 and 16 envs."""
    if entry.name != "ae_ddpg":
        return []
    return [
        Variant(axes={"change": "none"}),
        *(Variant(label, {"replay_buffer_class": expr}, {"change": label}) for label, expr in _REPLAY_CLASSES.items()),
        Variant("gaussian noise", {"noise_type": "normal", "noise_std": 0.15}, {"change": "gaussian noise"}),
        Variant("OU noise", {"noise_type": "ornstein-uhlenbeck", "noise_std": 0.2}, {"change": "OU noise"}),
        Variant("1 env", {"n_envs": 1}, {"change": "1 env"}),
        Variant("16 envs", {"n_envs": 16}, {"change": "16 envs"}),
    ]


register_suite(
    Suite(
        "ae_ddpg_ablation",
        "Pendulum-v1, AE-DDPG's ablations (the paper's §V-C at small scale): episodic vs uniform vs prioritized replay, "
        "random-walk vs Gaussian vs OU noise, 1 vs 4 vs 16 envs; env steps and seconds to -200",
        "race",
        ("Pendulum-v1",),
        seeds=3,
        eval_interval=1000,
        budget_seconds=300,
        algos=("ae_ddpg",),
        include_peers=False,
        variants=ae_ddpg_ablation_variants,
    )
)


register_suite(
    Suite(
        "memory",
        "CartPoleNoVel-v1 (CartPole without velocities: needs memory), time to a 475 evaluation mean, A3C with an LSTM "
        "against sb3-contrib's RecurrentPPO (the zoo's ppo_lstm settings), and the feed-forward A3C for contrast",
        "race",
        ("CartPoleNoVel-v1",),
        seeds=3,
        eval_interval=5_000,  # RecurrentPPO runs ~200 env steps/s here: 10k steps would be a 50 s grid for it
        budget_seconds=600,
        algos=("a3c",),
        variants=memory_variants,
    )
)


def learning_starts_variants(entry: AlgorithmEntry) -> list[Variant]:
    """Every algorithm with 1000 and with 10 000 random warm-up steps (AE-DDPG's entry and the zoo's DDPG differ there)."""
    return [Variant(f"learning_starts {n}", {"learning_starts": n}, {"learning_starts": n}) for n in (1000, 10_000)]


#: AE-DDPG's updates per transition in ``ae_ddpg_halfcheetah_updates`` (its zoo entry: 1; the paper fixes no ratio).
UPDATE_RATIOS = (2.0, 4.0)


def update_ratio_variants(entry: AlgorithmEntry) -> list[Variant]:
    """AE-DDPG with each of :data:`UPDATE_RATIOS` updates per transition; its peers as configured."""
    if entry.name != "ae_ddpg":
        return [Variant()]
    return [
        Variant(f"{k:g} updates per transition", {"updates_per_transition": k}, {"updates_per_transition": k})
        for k in UPDATE_RATIOS
    ]


# AE-DDPG against DDPG at equal warm-up (the paper's claim: 2-4x DDPG's sample efficiency): the pendulum and mujoco
# suites run each with its own config, and most of the gap in env steps there is learning_starts (1000 against 10 000).
register_suite(
    Suite(
        "ae_ddpg_sample_efficiency",
        "Pendulum-v1, AE-DDPG vs DDPG with equal learning_starts (1000, then 10 000): env steps to -200, evaluation "
        "every 1000 env steps",
        "race",
        ("Pendulum-v1",),
        eval_interval=1_000,
        budget_seconds=300,
        algos=("ae_ddpg", "ddpg"),
        include_peers=False,
        variants=learning_starts_variants,
    )
)
register_suite(
    Suite(
        "ae_ddpg_halfcheetah_sample_efficiency",
        "HalfCheetah-v5, AE-DDPG vs DDPG, 10 000 warm-up steps each: env steps to 3000, evaluation every 10 000 env "
        "steps (needs mujoco)",
        "race",
        ("HalfCheetah-v5",),
        eval_interval=10_000,
        budget_seconds=700,
        algos=("ae_ddpg", "ddpg"),
        include_peers=False,
    )
)
register_suite(
    Suite(
        "ae_ddpg_halfcheetah_updates",
        "HalfCheetah-v5, AE-DDPG with 2 and 4 updates per transition (10 000 warm-up steps), evaluation every 10 000 env "
        "steps; DDPG's entry beside it with --algos ae_ddpg,ddpg (needs mujoco)",
        "race",
        ("HalfCheetah-v5",),
        eval_interval=10_000,
        budget_seconds=480,
        algos=("ae_ddpg",),
        include_peers=False,
        variants=update_ratio_variants,
    )
)
