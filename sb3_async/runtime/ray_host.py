"""The Ray actor of ``backend="ray"``: a *host* running a group of workers with the
:class:`~sb3_async.runtime.mp.MultiprocessingRuntime` on one node, and the arithmetic of its exchanges with the driver.

The driver side, and the design of the exchanges, is :class:`~sb3_async.runtime.ray_backend.RayRuntime`. A host
answers one exchange at a time: it takes the driver's flags, step counts and published entries, polls its workers, and
returns their messages with its own changes to the ``synced`` entries (:func:`merge_changes`) and the rows of the
``owned`` entries its workers write.
"""

from __future__ import annotations

from typing import Any

import cloudpickle
import numpy as np
import torch

from sb3_async.runtime.base import WorkerSpec
from sb3_async.runtime.mp import MultiprocessingRuntime
from sb3_async.runtime.processes import WorkerError, main_module_importable
from sb3_async.runtime.seqlock import read_rows, seqlock_groups, write_rows

__all__ = ["RayHost", "entry_tensors", "merge_changes"]


def entry_tensors(entry: Any) -> list[torch.Tensor]:
    """The tensors of a ``shared`` entry (a tensor, or lists / tuples / dicts of them), in a fixed order."""
    if isinstance(entry, torch.Tensor):
        return [entry]
    if isinstance(entry, dict):
        return [tensor for value in entry.values() for tensor in entry_tensors(value)]
    if isinstance(entry, (list, tuple)):
        return [tensor for value in entry for tensor in entry_tensors(value)]
    raise TypeError(f"Invalid shared entry of type {type(entry).__name__}: expected tensors (in lists or dicts)")


def merge_changes(local: list[torch.Tensor], base: list[torch.Tensor], global_values: list[np.ndarray]) -> list[np.ndarray]:
    """One synchronization of a machine's copy with the global copy (DistBelief-style, additive).

    ``base`` is what this machine last knew of the global copy, its own changes included, so ``global - base`` are
    the other machines' changes since then and ``local - base`` are this machine's. In place: ``local += global -
    base`` (the others' changes, added without stopping the workers writing ``local``) and ``base = global + own``.
    Returns this machine's changes, to be added to the global copy. Pure tensor arithmetic (tested by hand values).
    """
    changes = []
    for local_tensor, base_tensor, value in zip(local, base, global_values):
        local_array, base_array = local_tensor.detach().numpy(), base_tensor.detach().numpy()  # views: in place
        own = local_array - base_array
        local_array += value - base_array
        base_array[...] = value + own
        changes.append(own)
    return changes


class RayHost:
    """A Ray actor running a group of workers with a :class:`MultiprocessingRuntime` (shared memory inside it).

    :param blob: the group's specs, cloudpickled
    :param ranks: the global rank of each spec
    :param n_total: workers in the whole run
    :param seed: base seed of the run (see :func:`~sb3_async.runtime.restart_seed` for restarted hosts)
    :param start_timesteps: global steps before this ``learn()`` call
    :param total_timesteps: global step budget
    :param start_method: start method of the host's worker processes
    """

    def __init__(
        self,
        blob: bytes,
        ranks: list[int],
        n_total: int,
        seed: int,
        start_timesteps: int,
        total_timesteps: int,
        start_method: str,
    ):
        torch.set_num_threads(1)
        specs: list[WorkerSpec] = cloudpickle.loads(blob)
        first = specs[0].shared
        self._synced = [tensor for name in specs[0].synced for tensor in entry_tensors(first[name])]
        self._base = [tensor.detach().clone() for tensor in self._synced]
        self._averaged = [tensor for name in specs[0].averaged for tensor in entry_tensors(first[name])]
        self._owned = [group for name in specs[0].owned for group in seqlock_groups(first[name])]
        self._own_rows = np.asarray(ranks) + 1
        self._published = {name: entry_tensors(first[name]) for name in specs[0].published}
        self._runtime = MultiprocessingRuntime(start_method)
        with main_module_importable(always=True):
            self._runtime.start(specs, seed, start_timesteps, total_timesteps, ranks=ranks, n_total=n_total)

    def node_id(self) -> str:
        """The Ray node this host runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def exchange(
        self,
        stop: bool,
        pause: bool,
        steps_elsewhere: int,
        published: dict[str, list[Any]],
        global_values: list[np.ndarray] | None,
        wait: float,
        owned: list[dict[str, np.ndarray]] | None = None,
    ) -> dict[str, Any]:
        """One round with the driver (see the module docstring); waits up to ``wait`` seconds for a message."""
        import ray

        for name, (ref,) in published.items():  # the reference travels in a list, so Ray does not resolve it for us
            for tensor, value in zip(self._published[name], ray.get(ref)):
                tensor.detach().numpy()[...] = value
        runtime = self._runtime
        runtime.set_steps_elsewhere(steps_elsewhere)
        if stop:
            runtime.request_stop()
        runtime.set_pause(pause)
        if owned is not None:  # the rows other machines write, as the driver last received them
            for group, values in zip(self._owned, owned):
                others = np.setdiff1d(np.arange(len(group["versions"])), self._own_rows)
                write_rows(group, others, {name: value[others] for name, value in values.items()})
        errors: list[tuple[int, str, int | None, str | None]] = []
        try:
            messages = runtime.poll(wait)
        except WorkerError as error:
            messages = []
            errors.append((error.rank, error.name, error.exitcode, error.worker_traceback))
        # Parked before the changes are read: a parked host's reply then carries every change its workers made.
        parked = runtime.parked()
        changes = None if global_values is None else merge_changes(self._synced, self._base, global_values)
        averaged = None if global_values is None else [tensor.detach().numpy().copy() for tensor in self._averaged]
        own = None if global_values is None else [read_rows(group, self._own_rows) for group in self._owned]
        return dict(
            messages=messages,
            steps=runtime.steps(),
            parked=parked,
            finished=not runtime.running(),
            errors=errors,
            changes=changes,
            averaged=averaged,
            owned=own,
        )

    def restart(self, rank: int) -> None:
        with main_module_importable(always=True):
            self._runtime.restart(rank)

    def close(self) -> None:
        self._runtime.close()
