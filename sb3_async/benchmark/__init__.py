"""The benchmark: ``python -m sb3_async.benchmark --suite NAME --out DIR`` (``--list`` shows the suites).

It runs sb3_async's algorithms and their peers (stock SB3, and other libraries through
:mod:`~sb3_async.benchmark.peers`: ``--peers-from benchmarks/peers`` registers the repository's) under the same protocol
(docs/benchmarks.md):
hyperparameters from the RL Zoo's YAML files, each run in a fresh process on the same cores, runs interleaved, deterministic
evaluation every fixed number of env steps with the evaluation time off the clock, and it writes
``DIR/results.json`` (one record per run), ``DIR/results.md`` (ratios first) and PNG plots.

- :mod:`~sb3_async.benchmark.registry`: envs and their thresholds, algorithms and their peers
  (:func:`register_algorithm`: how a new algorithm joins);
- :mod:`~sb3_async.benchmark.plan`: what a suite is and the runs it makes; :mod:`~sb3_async.benchmark.suites`: the
  named suites (:func:`register_suite`);
- :mod:`~sb3_async.benchmark.run_one`: one run, in its own process (:mod:`~sb3_async.benchmark.records`: what every
  run writes; :mod:`~sb3_async.benchmark.peers`: the protocol of the external peers' adapters);
- :mod:`~sb3_async.benchmark.runner`: a whole suite, with a progress bar;
- :mod:`~sb3_async.benchmark.stats`: the runs aggregated over seeds (medians, ratios to the peers);
- :mod:`~sb3_async.benchmark.report` and :mod:`~sb3_async.benchmark.plots`: the tables and plots, both reading
  ``stats``.

See ``docs/benchmarks.md``.
"""

from sb3_async.benchmark.registry import (
    ALGORITHMS,
    ENVS,
    AlgorithmEntry,
    EnvEntry,
    get_algorithm,
    get_env,
    load_peers,
    register_algorithm,
    register_env,
)
from sb3_async.benchmark.suites import RunSpec, Suite, Variant, get_suite, list_suites, plan_runs, register_suite

__all__ = [
    "ALGORITHMS",
    "ENVS",
    "AlgorithmEntry",
    "EnvEntry",
    "RunSpec",
    "Suite",
    "Variant",
    "get_algorithm",
    "get_env",
    "get_suite",
    "load_peers",
    "plan_runs",
    "register_algorithm",
    "register_env",
    "register_suite",
    "list_suites",
]
