"""The pool's record of its steps: which envs have a step in flight, which steps each env host has yet to answer, the
results received and not taken, the errors not reported, the envs of respawned hosts and the dead hosts.

:class:`StepBook` is plain state with two small rules (:meth:`StepBook.take`, :meth:`StepBook.restarts`); it talks to no
host. This module does not import torch.
"""

from __future__ import annotations

from collections import deque

from sb3_async.runtime.processes import WorkerError


class StepBook:
    """The steps of ``n_groups`` groups of envs, from send to take.

    :param n_groups: the number of groups (:attr:`~sb3_async.env_pool.groups.EnvGroups.ids`)
    """

    def __init__(self, n_groups: int):
        #: Per group, its step commands not answered yet, in order: (send sequence number, the ids stepped)
        self.pending: list[deque[tuple[int, list[int]]]] = [deque() for _ in range(n_groups)]
        self.in_flight: dict[int, int] = {}  # env id -> send sequence number of its step not taken yet
        self.ready: dict[int, tuple[int, dict]] = {}  # env id -> (seq, info) of a step received, not returned yet
        self.errors: dict[int, str] = {}  # env id -> traceback of a step not yet reported
        self.lost: dict[int, str] = {}  # env id -> why its host was respawned (reported at its next step)
        self.dead: dict[int, WorkerError] = {}  # host -> its error: its envs fail every call
        self.seq = 0  # the last send's sequence number

    def next_seq(self) -> int:
        """The sequence number of a new send."""
        self.seq += 1
        return self.seq

    def take(self, seq: int, ids: list[int], infos: dict[int, dict], errors: dict[int, str]) -> None:
        """Keep the step results of ``ids`` (sent as ``seq``: returned oldest first) until they are asked for."""
        ready = self.ready
        for i in ids:
            if i in errors:
                self.errors[i] = errors[i]
            else:
                ready[i] = (seq, infos.get(i) or {})

    def restarts(self, ids: list[int]) -> dict[int, str] | None:
        """The envs of ``ids`` whose host was respawned since their last step, and why (taken: reported once)."""
        if not self.lost:
            return None
        return {i: self.lost.pop(i) for i in ids if i in self.lost} or None

    def forget(self, ids: list[int]) -> None:
        """Drop whatever is recorded of the steps of ``ids`` (their results, errors, and that they are in flight)."""
        for i in ids:
            self.ready.pop(i, None)
            self.errors.pop(i, None)
            self.in_flight.pop(i, None)
