"""Running normalization shared by every worker: SB3's ``VecNormalize``, with one set of statistics for all of them.

Users normalize as with SB3: they wrap the env in ``VecNormalize`` (the zoo does it for ``normalize: True``) and pass
it to the algorithm. Each worker rebuilds the same ``VecNormalize`` around its own env copies (same options:
``norm_obs``, ``norm_reward``, ``clip_obs``, ``clip_reward``, ``gamma``, ``epsilon``, ``norm_obs_keys``, ``training``;
the discounted returns of reward scaling stay per env, as in ``VecNormalize``), but its ``obs_rms`` / ``ret_rms``
are :class:`SharedRunningMeanStd` views on statistics in shared memory, updated by every worker. The main process'
``VecNormalize`` (``model.get_vec_normalize_env()``, the one ``EvalCallback``'s ``sync_envs_normalization`` and the
zoo's ``vecnormalize.pkl`` read) holds live views of the same statistics during ``learn()`` and plain
``RunningMeanStd`` snapshots outside it; it never updates them itself.

Concurrency: **one accumulator per worker, merged on read** (the parallel algorithm of Chan et al. 1979). Worker ``i``
is the only writer of slot ``i + 1`` (slot 0 holds the statistics from before this ``learn()``), so no update is ever
lost, which a single shared ``(mean, var, count)`` updated read-modify-write by several processes would do (and
leave mean, var and count inconsistent with each other for good). Each slot carries a sequence number, odd while
its writer is writing (a seqlock, :mod:`sb3_async.runtime.seqlock`): a reader retries instead of using a
half-written slot. No lock is taken, so a worker never waits for another one, and merging a few slots costs a
handful of vectorized NumPy operations per step. The merged statistics equal those of one ``RunningMeanStd`` fed the
union of every worker's batches, in any order (Chan's merge is exact up to float rounding). RLlib's ``MeanStdFilter``
keeps per-worker buffers too, but merges them only when the driver synchronizes the workers; here every worker on a
machine sees the others' data at once. Across machines (``backend="ray"``) the statistics are a
:attr:`~sb3_async.runtime.WorkerSpec.owned` entry: every ``sync_interval`` each slot is copied from the machine
of its writer to the driver and from there to the other machines, so all of them merge the same slots.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecNormalize

from sb3_async.runtime.seqlock import read_rows, write_rows

#: The ``VecNormalize`` options a worker's copy is rebuilt with (its constructor's arguments).
VEC_NORMALIZE_OPTIONS = ("training", "norm_obs", "norm_reward", "clip_obs", "clip_reward", "gamma", "epsilon", "norm_obs_keys")


def vec_normalize_options(venv: VecNormalize) -> dict[str, Any]:
    """The constructor arguments that rebuild ``venv`` (without its statistics)."""
    options = {name: getattr(venv, name) for name in VEC_NORMALIZE_OPTIONS}
    options["norm_obs_keys"] = list(options["norm_obs_keys"]) if options["norm_obs_keys"] is not None else None
    return options


def merge_moments(counts: np.ndarray, means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    r"""Mean, variance and count of the union of ``k`` sets from each set's count, mean and (population) variance
    (Chan, Golub and LeVeque 1979, the parallel form of ``RunningMeanStd.update_from_moments``):

    .. math::
        N = \sum_k n_k, \qquad \mu = \frac{1}{N} \sum_k n_k \mu_k, \qquad
        \sigma^2 = \frac{1}{N} \sum_k n_k \left(\sigma_k^2 + (\mu_k - \mu)^2\right)

    Sets with ``n_k = 0`` count for nothing.

    :param counts: ``(k,)``
    :param means: ``(k, *shape)``
    :param variances: ``(k, *shape)``
    :return: ``(mean, var, count)``
    """
    counts = np.asarray(counts, dtype=np.float64)
    means = np.asarray(means, dtype=np.float64)
    variances = np.asarray(variances, dtype=np.float64)
    if counts.ndim != 1 or means.shape[:1] != counts.shape or means.shape != variances.shape:
        raise ValueError(
            f"Shapes do not match: counts {counts.shape}, means {means.shape}, variances {variances.shape}; "
            "expected (k,), (k, *shape) and (k, *shape)"
        )
    if counts.sum() <= 0.0:
        raise ValueError("merge_moments needs at least one set with a positive count")
    return _merge(counts, means, variances)


def _merge(counts: np.ndarray, means: np.ndarray, variances: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`merge_moments` without the checks, in few NumPy calls: workers run it at every step."""
    total = float(counts.sum())
    weights = counts / total
    flat_means = means.reshape(len(counts), -1)
    mean = weights @ flat_means
    var = weights @ (variances.reshape(len(counts), -1) + np.square(flat_means - mean))
    return mean.reshape(means.shape[1:]), var.reshape(means.shape[1:]), total


class SharedRunningMeanStd(RunningMeanStd):
    """A ``RunningMeanStd`` whose statistics live in shared memory, one accumulator slot per writer.

    :param tensors: the shared tensors from :func:`share_running_mean_std` (``counts``, ``means``, ``vars``,
        ``versions``)
    :param slot: the slot this process writes (a worker's ``rank + 1``); None: read-only (the main process)
    """

    def __init__(self, tensors: dict[str, torch.Tensor], slot: int | None = None):  # no super().__init__: no own state
        self.tensors = tensors
        self._counts = tensors["counts"].numpy()
        self._means = tensors["means"].numpy()
        self._vars = tensors["vars"].numpy()
        if slot is not None and not 1 <= slot < len(self._counts):
            raise ValueError(f"Invalid slot={slot}: expected 1 <= slot < {len(self._counts)}")
        self.slot = slot
        self._cached: tuple[np.ndarray, np.ndarray, float] | None = None

    # Read: a consistent copy of every slot (seqlock), merged.
    def snapshot_moments(self) -> tuple[np.ndarray, np.ndarray, float]:
        """``(mean, var, count)`` of every slot merged."""
        rows = read_rows(self.tensors)
        return _merge(rows["counts"], rows["means"], rows["vars"])

    def _moments(self) -> tuple[np.ndarray, np.ndarray, float]:
        if self.slot is not None and self._cached is not None:
            return self._cached  # a worker refreshes its copy at each of its own updates
        moments = self.snapshot_moments()
        if self.slot is not None:
            self._cached = moments
        return moments

    @property
    def mean(self) -> np.ndarray:  # type: ignore[override]
        return self._moments()[0]

    @property
    def var(self) -> np.ndarray:  # type: ignore[override]
        return self._moments()[1]

    @property
    def count(self) -> float:  # type: ignore[override]
        return self._moments()[2]

    def update(self, arr: np.ndarray) -> None:
        """Merge a batch into this process' slot (Chan's update, as ``RunningMeanStd.update``), then re-read all."""
        if self.slot is None:
            raise RuntimeError("This process only reads the shared statistics (the workers update them)")
        arr = np.asarray(arr, dtype=np.float64)
        batch_mean, batch_var, batch_count = arr.mean(axis=0), arr.var(axis=0), arr.shape[0]
        slot = self.slot
        # RunningMeanStd.update_from_moments on this slot (an empty slot becomes the batch's moments)
        old_count, old_mean, old_var = float(self._counts[slot]), self._means[slot], self._vars[slot]
        count = old_count + batch_count
        delta = batch_mean - old_mean
        mean = old_mean + delta * (batch_count / count)
        var = (old_var * old_count + batch_var * batch_count + np.square(delta) * (old_count * batch_count / count)) / count
        write_rows(self.tensors, slot, dict(means=mean, vars=var, counts=count))
        self._cached = self.snapshot_moments()

    def update_from_moments(self, batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float) -> None:
        raise NotImplementedError("SharedRunningMeanStd is updated through update()")

    def copy(self) -> RunningMeanStd:
        """A plain ``RunningMeanStd`` with the current statistics."""
        mean, var, count = self.snapshot_moments()
        plain = RunningMeanStd(shape=mean.shape)
        plain.mean, plain.var, plain.count = mean.copy(), var.copy(), count
        return plain

    # Pickled (vecnormalize.pkl, model.save) and deep-copied (sync_envs_normalization) as SB3's own class, so that
    # files load without sb3_async and an eval env gets frozen statistics, not a live view.
    def __reduce__(self) -> Any:
        plain = self.copy()
        return RunningMeanStd, (1e-4, plain.mean.shape), plain.__dict__

    def __deepcopy__(self, memo: dict[int, Any]) -> RunningMeanStd:
        return self.copy()


def share_running_mean_std(rms: RunningMeanStd, n_writers: int) -> dict[str, torch.Tensor]:
    """Shared tensors holding ``rms`` in slot 0 and ``n_writers`` empty slots (float64, as ``RunningMeanStd``)."""
    mean = np.asarray(rms.mean, dtype=np.float64)
    counts = torch.zeros(n_writers + 1, dtype=torch.float64)
    means = torch.zeros((n_writers + 1, *mean.shape), dtype=torch.float64)
    variances = torch.ones((n_writers + 1, *mean.shape), dtype=torch.float64)
    counts[0] = float(rms.count)
    means[0] = torch.from_numpy(mean.copy())
    variances[0] = torch.from_numpy(np.asarray(rms.var, dtype=np.float64).copy())
    return {
        "counts": counts.share_memory_(),
        "means": means.share_memory_(),
        "vars": variances.share_memory_(),
        "versions": torch.zeros(n_writers + 1, dtype=torch.int64).share_memory_(),
    }


def vec_normalizes(venv: VecEnv | None) -> list[VecNormalize]:
    """Every ``VecNormalize`` in ``venv``'s wrapper stack, outermost first."""
    found: list[VecNormalize] = []
    while venv is not None:
        if isinstance(venv, VecNormalize):
            found.append(venv)
        venv = venv.venv if isinstance(venv, VecEnvWrapper) else None
    return found


def share_statistics(venv: VecNormalize, n_writers: int) -> dict[str, Any]:
    """Shared tensors holding ``venv``'s statistics, for ``n_writers`` workers (see :func:`attach_statistics`).

    :return: ``{"ret_rms": tensors, "obs_rms": tensors}``, or ``"obs_rms_by_key": {key: tensors}`` for dict
        observations (no ``obs_rms`` without ``norm_obs``)
    """
    shared: dict[str, Any] = {"ret_rms": share_running_mean_std(venv.ret_rms, n_writers)}
    if venv.norm_obs and isinstance(venv.obs_rms, dict):
        shared["obs_rms_by_key"] = {key: share_running_mean_std(rms, n_writers) for key, rms in venv.obs_rms.items()}
    elif venv.norm_obs:
        shared["obs_rms"] = share_running_mean_std(venv.obs_rms, n_writers)
    return shared


def attach_statistics(venv: VecNormalize, shared: dict[str, Any], slot: int | None) -> None:
    """Make ``venv`` use the shared statistics: a worker (``slot``: its ``rank + 1``) updates its slot, the main
    process (``slot=None``) only reads."""
    venv.ret_rms = SharedRunningMeanStd(shared["ret_rms"], slot)
    if "obs_rms" in shared:
        venv.obs_rms = SharedRunningMeanStd(shared["obs_rms"], slot)  # type: ignore[assignment]
    elif "obs_rms_by_key" in shared:
        venv.obs_rms = {key: SharedRunningMeanStd(tensors, slot) for key, tensors in shared["obs_rms_by_key"].items()}


def detach_statistics(venv: VecNormalize) -> None:
    """Replace live shared statistics by plain ``RunningMeanStd`` snapshots (after ``learn()``)."""
    venv.ret_rms = copy.deepcopy(venv.ret_rms)
    if hasattr(venv, "obs_rms"):
        venv.obs_rms = copy.deepcopy(venv.obs_rms)


def statistics_state(venv: VecNormalize) -> dict[str, Any]:
    """Plain copies of ``venv``'s statistics, to save with the model."""
    state: dict[str, Any] = {"ret_rms": copy.deepcopy(venv.ret_rms)}
    if hasattr(venv, "obs_rms"):
        state["obs_rms"] = copy.deepcopy(venv.obs_rms)
    return state


def load_statistics_state(venv: VecNormalize, state: dict[str, Any]) -> None:
    """Put statistics saved by :func:`statistics_state` into ``venv``."""
    venv.ret_rms = copy.deepcopy(state["ret_rms"])
    if "obs_rms" in state and hasattr(venv, "obs_rms"):
        venv.obs_rms = copy.deepcopy(state["obs_rms"])


def main_vec_normalizes(env: VecEnv | None, vec_normalize_env: VecNormalize | None) -> list[VecNormalize]:
    """The main process' ``VecNormalize`` objects: those in the training env's wrapper stack and the model's
    ``get_vec_normalize_env()``, each once."""
    found = [*vec_normalizes(env), *([vec_normalize_env] if vec_normalize_env is not None else [])]
    return list({id(venv): venv for venv in found}.values())


def share_with_main(venv: VecNormalize, main: list[VecNormalize], n_writers: int) -> dict[str, Any]:
    """Shared statistics from ``venv``'s, with one slot per worker (rank ``i`` writes slot ``i + 1``), that every
    ``VecNormalize`` of ``main`` reads live (during ``learn()``)."""
    shared = share_statistics(venv, n_writers)
    for main_venv in main:
        attach_statistics(main_venv, shared, slot=None)
    return shared


def freeze_main(venv: VecNormalize, main: list[VecNormalize]) -> None:
    """Replace the live views of every ``VecNormalize`` of ``main`` by plain snapshots of ``venv``'s statistics
    (after ``learn()``)."""
    state = statistics_state(venv)
    for main_venv in main:
        load_statistics_state(main_venv, state)
