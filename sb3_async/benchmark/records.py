"""What every benchmark run writes, whichever process and library ran it: the progress lines the runner reads, the
memory sampler, and the record's identity fields (the spec it ran) and its failed form.

Light on purpose (the standard library, numpy and psutil): an external peer's adapter imports it in the peer's own
virtual environment, where neither SB3 nor the RL Zoo need be installed.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from typing import Any

import numpy as np
import psutil

from sb3_async.benchmark.plan import RunSpec

#: Prefix of the progress lines a run prints (the rest of its stdout is the libraries' chatter).
EVENT_PREFIX = "@@sb3_async.benchmark "


def emit(event: dict[str, Any]) -> None:
    """Tell the runner how the run is going."""
    print(EVENT_PREFIX + json.dumps(event), flush=True)


class PeakMemory(threading.Thread):
    """Samples the resident memory of this process and all its descendants.

    RSS is summed every ``interval`` seconds (cheap). PSS (proportional set size: a page shared by N processes
    counts 1/N in each, so the sum counts shared memory once) costs a page-table walk per process (milliseconds), so
    the thread samples it every ``pss_every`` samples only; the evaluation clock also samples it at each evaluation.
    """

    def __init__(self, interval: float = 0.5, pss_every: int = 10):
        super().__init__(daemon=True, name="peak-memory")
        self.interval, self.pss_every = interval, pss_every
        self.peak_rss = 0
        self.peak_pss = 0
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._process = psutil.Process()

    def sample(self, pss: bool) -> None:
        processes = [self._process]
        with contextlib.suppress(psutil.Error):
            processes += self._process.children(recursive=True)
        rss = total_pss = 0
        for process in processes:
            with contextlib.suppress(psutil.Error):
                if pss:
                    info = process.memory_full_info()
                    rss += info.rss
                    total_pss += getattr(info, "pss", info.rss)
                else:
                    rss += process.memory_info().rss
        with self._lock:
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, total_pss)

    def run(self) -> None:
        count = 0
        while not self._stop_event.wait(self.interval):
            count += 1
            self.sample(pss=count % self.pss_every == 2)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
        self.sample(pss=True)


def json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (np.integer, np.floating)):
        return json_safe(value.item())
    return str(value)


def identity(spec: RunSpec) -> dict[str, Any]:
    return dict(
        run_id=spec.run_id,
        suite=spec.suite,
        algo=spec.algo,
        library=spec.library,
        env=spec.env_id,
        seed=spec.seed,
        variant=spec.variant,
        axes=spec.axes,
        overrides=spec.params,
        threshold=spec.threshold,
        eval_interval=spec.eval_interval,
        n_eval_episodes=spec.n_eval_episodes,
        budget_seconds=spec.budget_seconds,
        stop_at_threshold=spec.stop_at_threshold,
        evaluate_after_threshold=spec.evaluate_after_threshold,
        device=spec.device,
        torch_threads=spec.torch_threads,
    )


def failed_record(spec: RunSpec, error: str) -> dict[str, Any]:
    """The record of a run that did not finish: no measurement, the error."""
    return dict(
        **identity(spec),
        hyperparameters=None,
        hyperparameters_source=None,
        reached=False,
        seconds_to_threshold=None,
        steps_to_threshold=None,
        final_eval_mean=None,
        final_eval_std=None,
        env_steps=None,
        train_seconds=None,
        eval_seconds=None,
        startup_seconds=None,
        setup_seconds=None,
        steps_per_second=None,
        steps_per_second_after_startup=None,
        peak_rss_mb=None,
        peak_pss_mb=None,
        stop_reason="error",
        curve=[],
        error=error,
    )
