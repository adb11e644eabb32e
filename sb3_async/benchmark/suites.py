"""Named benchmark suites and the list of runs each one makes.

A suite is a set of envs, a way to pick algorithms from the registry, a number of seeds, the evaluation interval, the
step and time limits, and *variants* (hyperparameter overrides: worker counts for ``scaling``, optimizer and learning
rate for ``optimizers``). :func:`plan_runs` turns a suite into :class:`RunSpec` s, interleaved
(``for seed: for env: for algorithm: for variant``) so that slow drifts of the machine hit every algorithm alike.

Suites are registered with :func:`register_suite`; ``python -m sb3_async.benchmark --list`` shows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sb3_async.benchmark.registry import (
    ALGORITHMS,
    VENV_SCRIPTS,
    AlgorithmEntry,
    get_algorithm,
    get_env,
    peers_of,
)
from sb3_async.validation import check_int

#: How a suite's results are reported (see :mod:`sb3_async.benchmark.report`).
KINDS = ("race", "scaling", "sweep", "final")


@dataclass(frozen=True)
class Variant:
    """Hyperparameter overrides applied on top of the zoo config for some runs of a suite.

    :param label: shown in tables and plots
    :param params: overrides, in the zoo's format (``"lin_1e-3"`` schedules allowed), applied like ``-params``
    :param axes: the values the report groups by (``{"n_workers": 2}``, ``{"optimizer": "sgd", "learning_rate": 1e-3}``)
    """

    label: str = "default"
    params: Mapping[str, Any] = field(default_factory=dict)
    axes: Mapping[str, Any] = field(default_factory=dict)


def default_variants(entry: AlgorithmEntry) -> list[Variant]:
    """Every algorithm with its zoo config as it is."""
    return [Variant()]


@dataclass(frozen=True)
class Suite:
    """A named benchmark.

    :param name: the ``--suite`` value
    :param description: one line for ``--list`` and the report
    :param kind: ``"race"`` (time to threshold, ours against peers), ``"scaling"`` (against worker count) or
        ``"sweep"`` (final score over a hyperparameter sweep)
    :param envs: env ids (registered in :mod:`sb3_async.benchmark.registry`)
    :param seeds: seeds per (algorithm, env, variant): ``0 .. seeds - 1``
    :param eval_interval: env steps between two deterministic evaluations
    :param max_steps: env steps of a run; None: the config's ``n_timesteps`` (its schedules are tuned for it)
    :param budget_seconds: training-clock seconds of a run (evaluation excluded); None: no limit
    :param stop_at_threshold: stop a run at its first evaluation reaching the env's threshold
    :param algos: the algorithms; None: every sb3_async algorithm registered for one of the envs
    :param include_peers: add the SB3 peers of the chosen algorithms (external peers run only when named)
    :param variants: the variants of each algorithm (an empty list leaves the algorithm out of the suite)
    :param n_eval_episodes: episodes per evaluation
    :param torch_threads: torch threads of the main process of every run (``torch.set_num_threads``; our workers
        always use one each); None: torch's default (one per core). 1 is SB3's faster setting for small MLPs on
        2 cores (see docs/benchmarks.md, "Torch threads")
    :param evaluate_after_threshold: with ``stop_at_threshold=False``, keep evaluating every ``eval_interval``
        after the threshold is reached (False: only a final evaluation, fewer pauses of the workers)
    :param evals_per_run: when set, each run evaluates every ``n_timesteps // evals_per_run`` env steps instead of
        ``eval_interval`` (runs of different lengths, e.g. DQN's 50k and our 500k, get as many evaluations)
    :param final_eval_episodes: when set, the model ``learn()`` returns is also evaluated for that many deterministic
        episodes on a fresh eval env (the ``final`` kind's "final policy")
    """

    name: str
    description: str
    kind: str
    envs: tuple[str, ...]
    seeds: int = 3
    eval_interval: int = 10_000
    max_steps: int | None = None
    budget_seconds: float | None = None
    stop_at_threshold: bool = True
    algos: tuple[str, ...] | None = None
    include_peers: bool = True
    variants: Callable[[AlgorithmEntry], Sequence[Variant]] = default_variants
    n_eval_episodes: int = 10
    torch_threads: int | None = 1
    evaluate_after_threshold: bool = True
    evals_per_run: int | None = None
    final_eval_episodes: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Invalid kind={self.kind!r} for suite {self.name!r}: expected one of {', '.join(KINDS)}")


@dataclass(frozen=True)
class RunSpec:
    """One run: what ``python -m sb3_async.benchmark.run_one`` executes in a fresh process (JSON-serializable); an
    external peer's run is ``PYTHON -m ADAPTER`` instead (``python``: the interpreter of the peer's environment)."""

    suite: str
    run_id: str
    algo: str
    library: str
    env_id: str
    seed: int
    variant: str
    params: dict[str, Any]
    axes: dict[str, Any]
    threshold: float
    eval_interval: int
    n_eval_episodes: int
    max_steps: int | None
    budget_seconds: float | None
    stop_at_threshold: bool
    config: str
    config_alias: str | None
    device: str = "cpu"
    torch_threads: int | None = 1
    evaluate_after_threshold: bool = True
    evals_per_run: int | None = None
    final_eval_episodes: int | None = None
    adapter: str | None = None
    python: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        return cls(**data)


_SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> Suite:
    """Add a suite (or replace the one of that name)."""
    for env_id in suite.envs:
        get_env(env_id)
    _SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    """The suite called ``name``.

    :raises ValueError: naming the registered suites
    """
    try:
        return _SUITES[name]
    except KeyError:
        raise ValueError(f"Unknown suite {name!r}: expected one of {', '.join(_SUITES)}") from None


def list_suites() -> list[Suite]:
    """The registered suites, in registration order."""
    return list(_SUITES.values())


def select_algorithms(suite: Suite, algos: Sequence[str] | None = None) -> list[str]:
    """The algorithms a suite runs: ``algos`` if given (checked), else the suite's own choice plus peers.

    :raises ValueError: for an unknown algorithm, or one registered for none of the suite's envs
    """
    if algos is not None:
        chosen = list(dict.fromkeys(algos))
        for name in chosen:
            entry = get_algorithm(name)
            if not set(entry.envs) & set(suite.envs):
                usable = sorted(n for n, e in ALGORITHMS.items() if set(e.envs) & set(suite.envs))
                raise ValueError(
                    f"Algorithm {name!r} is not benchmarked on {', '.join(suite.envs)} (suite {suite.name!r}): "
                    f"expected one of {', '.join(usable)}"
                )
        return chosen
    if suite.algos is not None:
        ours = [get_algorithm(name).name for name in suite.algos]
    else:
        ours = [name for name, entry in ALGORITHMS.items() if entry.is_ours and set(entry.envs) & set(suite.envs)]
    chosen = list(ours)
    if suite.include_peers:  # the SB3 peers benchmarked on the suite's envs (A3C's ppo_lstm: CartPoleNoVel-v1 only)
        for name in ours:
            chosen += [
                peer
                for peer in peers_of(name)
                if peer not in chosen
                and not get_algorithm(peer).is_external  # they need their own environments: only when named
                and set(get_algorithm(peer).envs) & set(suite.envs)
            ]
    return chosen


#: The repository's root, where ``benchmarks/peers/make_peer_venvs.sh`` builds the peers' environments.
REPO_ROOT = Path(__file__).resolve().parents[2]


def peer_python(entry: AlgorithmEntry, pythons: Mapping[str, str] | None = None) -> str:
    """The interpreter an external peer runs under: ``pythons[entry.name]``, else ``pythons[entry.python_env]``, else
    ``.venv-<python_env>/bin/python`` at the repository's root (a virtual environment's interpreter path is kept as
    given, not resolved: the link is what selects the environment).

    :raises ValueError: when none of them exists, saying how to build it or name it
    """
    pythons = pythons or {}
    given = pythons.get(entry.name, pythons.get(str(entry.python_env)))
    path = Path(given) if given is not None else REPO_ROOT / f".venv-{entry.python_env}" / "bin" / "python"
    if not path.is_file():
        script = VENV_SCRIPTS.get(str(entry.python_env))
        how = f"{script} builds it" if script else f"no script here builds .venv-{entry.python_env}"
        raise ValueError(
            f"No Python for peer {entry.name!r}: {path} does not exist ({how}; or pass "
            f"--peer-python {entry.python_env}=PATH, the interpreter of an environment with its library)"
        )
    return str(path.absolute())


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def plan_runs(
    suite: Suite,
    algos: Sequence[str] | None = None,
    seeds: int | None = None,
    budget_seconds: float | None = None,
    device: str = "cpu",
    torch_threads: int | None = -1,
    first_seed: int = 0,
    envs: Sequence[str] | None = None,
    pythons: Mapping[str, str] | None = None,
) -> list[RunSpec]:
    """Every run of ``suite``, interleaved: ``for seed: for env: for algorithm: for variant``.

    :param algos: restrict to these algorithms (default: :func:`select_algorithms`)
    :param seeds: number of seeds (default: the suite's)
    :param first_seed: the seeds are ``first_seed .. first_seed + seeds - 1`` (to add seeds to an earlier run)
    :param envs: restrict to these of the suite's envs (default: all of them)
    :param budget_seconds: training-clock budget per run (default: the suite's)
    :param device: torch device of the models (the same for every algorithm)
    :param torch_threads: torch threads of each run's main process (default -1: the suite's; 0 or None: torch's
        default)
    :param pythons: the interpreters of external peers, by peer or environment name (see :func:`peer_python`)
    """
    names = select_algorithms(suite, algos)
    interpreters = {name: peer_python(entry, pythons) for name in names if (entry := get_algorithm(name)).is_external}
    n_seeds = suite.seeds if seeds is None else check_int("seeds", seeds, 1)
    first_seed = check_int("first_seed", first_seed, 0)
    budget = suite.budget_seconds if budget_seconds is None else float(budget_seconds)
    threads = suite.torch_threads if torch_threads == -1 else (torch_threads or None)
    env_ids = list(suite.envs)
    if envs is not None:
        unknown = [env_id for env_id in envs if env_id not in suite.envs]
        if unknown or not envs:
            raise ValueError(f"Invalid envs={list(envs)!r}: suite {suite.name!r} runs {', '.join(suite.envs)}")
        env_ids = [env_id for env_id in suite.envs if env_id in envs]
    runs: list[RunSpec] = []
    for seed in range(first_seed, first_seed + n_seeds):
        for env_id in env_ids:
            env = get_env(env_id)
            for name in names:
                entry = get_algorithm(name)
                if env_id not in entry.envs:
                    continue
                for variant in suite.variants(entry):
                    if entry.is_external and variant.params:
                        raise ValueError(
                            f"Suite {suite.name!r} overrides {', '.join(sorted(variant.params))} of {name!r}: an "
                            "external peer runs with its own library's settings only"
                        )
                    suffix = "" if variant.label == "default" else f"-{_slug(variant.label)}"
                    runs.append(
                        RunSpec(
                            suite=suite.name,
                            run_id=f"{env_id}-{name}{suffix}-s{seed}",
                            algo=name,
                            library=entry.library,
                            env_id=env_id,
                            seed=seed,
                            variant=variant.label,
                            params=dict(variant.params),
                            axes=dict(variant.axes),
                            threshold=env.threshold,
                            eval_interval=suite.eval_interval,
                            n_eval_episodes=suite.n_eval_episodes,
                            max_steps=suite.max_steps,
                            budget_seconds=budget,
                            stop_at_threshold=suite.stop_at_threshold,
                            config=str(entry.config_path()),
                            config_alias=entry.config_aliases.get(env_id),
                            device=device,
                            torch_threads=threads,
                            evaluate_after_threshold=suite.evaluate_after_threshold,
                            evals_per_run=suite.evals_per_run,
                            final_eval_episodes=suite.final_eval_episodes,
                            adapter=entry.adapter,
                            python=interpreters.get(name),
                        )
                    )
    if not runs:
        raise ValueError(f"Suite {suite.name!r} has no run for algorithms {', '.join(names)}")
    return runs


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
