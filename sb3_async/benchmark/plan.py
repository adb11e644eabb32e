"""What a benchmark suite is and the list of runs it makes (the suites themselves: :mod:`sb3_async.benchmark.suites`).

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

from sb3_async.benchmark.registry import (
    ALGORITHMS,
    VENV_SCRIPTS,
    AlgorithmEntry,
    get_algorithm,
    get_env,
    lookup,
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
    :param eval_intervals: algorithm name -> its own ``eval_interval``, for a race whose sides step at rates an order
        apart (in one invocation, each side's evaluations come about as many training minutes apart)
    :param max_steps: env steps of a run; None: the config's ``n_timesteps`` (its schedules are tuned for it)
    :param budget_seconds: training-clock seconds of a run (evaluation excluded); None: no limit
    :param stop_at_threshold: stop a run at its first evaluation reaching the env's threshold
    :param algos: the algorithms; None: every sb3_async algorithm registered for one of the envs
    :param include_peers: add the SB3 peers of the chosen algorithms (external peers run only when named, or with
        ``external_peers``)
    :param external_peers: add the external peers of the chosen algorithms that are registered (``--peers-from``), as
        the ``pong`` suite races A3C against Sample Factory and TorchRL
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
    eval_intervals: Mapping[str, int] = field(default_factory=dict)
    max_steps: int | None = None
    budget_seconds: float | None = None
    stop_at_threshold: bool = True
    algos: tuple[str, ...] | None = None
    include_peers: bool = True
    external_peers: bool = False
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
    external peer's run is its adapter instead (``PYTHON ADAPTER.py`` or ``PYTHON -m ADAPTER``; ``python``: the
    interpreter of the peer's environment)."""

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
    return lookup(_SUITES, name, "suite")


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
    # the peers benchmarked on the suite's envs (A3C's ppo_lstm: CartPoleNoVel-v1 only); external peers need their own
    # environments: only when named, or when the suite asks for them
    for name in ours:
        chosen += [
            peer
            for peer in peers_of(name)
            if peer not in chosen
            and (suite.external_peers if get_algorithm(peer).is_external else suite.include_peers)
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
                            eval_interval=suite.eval_intervals.get(name, suite.eval_interval),
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
