"""``backend="ray"``: the same :class:`~sb3_async.runtime.WorkerSpec` objects run as Ray actors on a Ray cluster.

Design: one Ray actor (a *host*, :class:`~sb3_async.runtime.ray_host.RayHost`) per group of workers, placed with
Ray's ``SPREAD`` strategy (by default one group per node of the cluster). A host runs today's
:class:`~sb3_async.runtime.mp.MultiprocessingRuntime` on its workers, so workers on one machine keep sharing memory
(Hogwild, Ape-X's parameter copy) exactly as with ``backend="mp"``. What shared memory cannot carry between machines,
the driver (the process calling ``learn()``) carries with one *exchange* call per host in flight at a time:

* driver → host: the stop and pause flags, the steps counted by the other hosts (every worker's global T), the
  ``published`` entries of the specs (Ape-X's parameters and inserted-block counts: one ``ray.put`` per change,
  shared by every host and pulled by reference), and every ``sync_interval`` seconds the driver's copy of the
  ``synced`` entries (θ and the optimizer statistics of A3C / the async Q family; the callbacks' latest observations)
  and the rows of the ``owned`` entries that other hosts' workers write (the shared ``VecNormalize`` statistics);
* host → driver: the workers' messages (statistics, Ape-X's NumPy transition blocks), their step count, whether they
  are parked or finished, a worker's failure with its traceback, and the changes the host's workers made to the
  ``synced`` entries since the last exchange, and the rows of the ``owned`` entries its own workers write (a
  consistent copy, :mod:`~sb3_async.runtime.seqlock`). The driver adds them to its copy (DistBelief's
  parameter server: the main process' policy *is* the global copy, so ``save()``, ``predict()`` and callbacks see
  every machine's updates) and each host adds the other hosts' changes to its own copy at the next exchange.

Failures: a host whose Ray actor or node dies makes :meth:`RayRuntime.poll` raise
:class:`~sb3_async.runtime.processes.WorkerError` for each of its workers (A3C and the async Q family stop there);
:meth:`RayRuntime.restart` starts a dead worker again, in a new host if its host is gone (Ape-X restarts its actors).
Hosts are named actors in the ``sb3_async`` namespace, owned by the driver: :meth:`RayRuntime.close` kills them
(an exception or Ctrl-C included), and Ray removes them if the driver dies, so a user's long-lived cluster keeps
nothing of ours. A Ray started here (no address given, none running) is shut down by :meth:`RayRuntime.close`; a Ray
the user started or a cluster we connected to is never shut down (``ray.shutdown()`` of a connected driver only
disconnects it). The workers' stdout and stderr reach the driver through Ray's log forwarding.
"""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle
import numpy as np
import torch

from sb3_async.runtime.base import Runtime, WorkerSpec, restart_seed
from sb3_async.runtime.processes import Launcher, WorkerError
from sb3_async.runtime.ray_connect import (  # the connect / release rules, shared with the env pool's Ray hosts
    NAMESPACE,
    RAY_INSTALL_HINT,
    check_connect_options,
    connect_ray,
    import_ray,
    release_ray,
    wait_ready,
)
from sb3_async.runtime.ray_host import RayHost, entry_tensors, merge_changes
from sb3_async.runtime.seqlock import read_rows, seqlock_groups, write_rows
from sb3_async.validation import check_int, check_nonnegative

__all__ = ["NAMESPACE", "RAY_INSTALL_HINT", "RayHost", "RayRuntime", "entry_tensors", "import_ray", "merge_changes"]

#: A ``published`` entry larger than this waits ``publish_interval`` between two ``ray.put`` (smaller ones go at once).
_SMALL_ENTRY_BYTES = 65536


@dataclass
class _HostState:
    """The driver's view of one host."""

    actor: Any
    name: str
    ranks: list[int]
    node_id: str | None = None
    inflight: Any = None
    inflight_pause: bool = False
    inflight_synced: bool = False
    steps: int = 0
    parked: bool = False
    finished: bool = False
    done: bool = False  # finished and its last changes merged: no more exchanges
    alive: bool = True
    last_sync: float = 0.0
    published_versions: dict[str, int] = field(default_factory=dict)
    averaged: list[np.ndarray] | None = None
    restarted: set[int] = field(default_factory=set)  # ranks restarted while an exchange was in flight


class RayRuntime(Runtime):
    """Workers as Ray actors on a Ray cluster (``backend="ray"``; module docstring: the design).

    :param start_method: start method of the worker processes inside each Ray actor (as for ``backend="mp"``)
    :param address: the Ray cluster to connect to (``ray.init(address=...)``); default the ``RAY_ADDRESS``
        environment variable, else a Ray already initialized in this process, else a local Ray started for the run
        (and shut down after it)
    :param init_kwargs: more arguments for ``ray.init`` when we call it (a local Ray gets ``num_cpus`` = max(CPU
        count, CPUs the workers ask for) and no dashboard unless given here)
    :param num_cpus_per_worker: Ray CPUs reserved per worker (1: each worker is one busy process; Ray sets
        ``OMP_NUM_THREADS`` of an actor from its CPUs)
    :param workers_per_actor: workers per Ray actor (host); default: the workers spread evenly over the cluster's
        alive nodes, one host per node (Hogwild and shared memory then stay inside a machine)
    :param sync_interval: seconds between two merges of the ``synced`` entries with the driver's copy (0.1: the
        round trip of a small network is ~1 ms here, so this costs little; see docs/guide/ray.md)
    :param publish_interval: least seconds between two ``ray.put`` of a ``published`` entry larger than 64 KiB (0.2:
        Ape-X's learner publishes after every ~20 ms of batches, and each node would pull a CNN's 13 MB each time;
        actors refresh only every 400 env steps, so a fresher copy gains nothing); small entries (the inserted-block
        counts of the flow control) go at once
    :param exchange_wait: how long a host waits for a message before answering an exchange (bounds the driver's
        view of the steps and the latency of stop / pause)
    :param start_timeout: seconds to wait for the hosts to run (Ray waits forever for CPUs the cluster lacks: we raise
        a ``TimeoutError`` saying what was asked instead)
    """

    def __init__(
        self,
        start_method: str = "forkserver",
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        num_cpus_per_worker: float = 1.0,
        workers_per_actor: int | None = None,
        sync_interval: float = 0.1,
        publish_interval: float = 0.2,
        exchange_wait: float = 0.02,
        start_timeout: float = 300.0,
    ):
        self._ray = import_ray()
        check_connect_options(address, init_kwargs)
        if workers_per_actor is not None:
            workers_per_actor = check_int("workers_per_actor", workers_per_actor, 1)
        for name, value in (
            ("num_cpus_per_worker", num_cpus_per_worker),
            ("sync_interval", sync_interval),
            ("publish_interval", publish_interval),
            ("exchange_wait", exchange_wait),
            ("start_timeout", start_timeout),
        ):
            check_nonnegative(name, value)
        self.start_method, self.address, self.init_kwargs = start_method, address, dict(init_kwargs or {})
        self.num_cpus_per_worker, self.workers_per_actor = float(num_cpus_per_worker), workers_per_actor
        self.sync_interval, self.exchange_wait = float(sync_interval), float(exchange_wait)
        self.publish_interval, self.start_timeout = float(publish_interval), float(start_timeout)
        self._last_put: dict[str, float] = {}
        self._run_id = uuid.uuid4().hex[:8]
        self._hosts: list[_HostState] = []
        self._host_of: dict[int, _HostState] = {}
        self._specs: list[WorkerSpec] = []
        self._run: tuple[int, int, int] = (0, 0, 0)
        self._generations: dict[int, int] = {}
        self._synced: list[torch.Tensor] = []
        self._averaged: list[torch.Tensor] = []
        self._owned: list[dict[str, torch.Tensor]] = []
        self._published: dict[str, list[torch.Tensor]] = {}
        self._versions: dict[str, int] = {}
        self._refs: dict[str, Any] = {}
        self._dirty: set[str] = set()
        self._errors: deque[WorkerError] = deque()
        self._failed: set[int] = set()
        self._held: list[tuple[int, str, Any]] = []
        self._retired_steps = 0
        self._stop = self._pause = False
        self._owns_ray = self._closed = False
        self.startup_seconds: float | None = None

    # --- cluster -----------------------------------------------------------------------------------------------------

    def _connect(self, n_workers: int) -> None:
        self._owns_ray = connect_ray(self._ray, self.address, self.init_kwargs, n_workers * self.num_cpus_per_worker)

    def _groups(self, n_workers: int) -> list[list[int]]:
        per_actor = self.workers_per_actor
        if per_actor is None:
            nodes = [node for node in self._ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0]
            per_actor = math.ceil(n_workers / max(1, len(nodes)))
        return [list(range(first, min(first + per_actor, n_workers))) for first in range(0, n_workers, per_actor)]

    def _start_host(self, ranks: list[int], seed: int) -> _HostState:
        ray = self._ray
        _, start_timesteps, total_timesteps = self._run
        name = f"sb3_async-{self._run_id}-host-{'-'.join(map(str, ranks))}-{self._generations[ranks[0]]}"
        actor = Launcher.actor(
            ray,
            RayHost,
            name,
            len(ranks) * self.num_cpus_per_worker,
            cloudpickle.dumps([self._specs[rank] for rank in ranks]),
            ranks,
            len(self._specs),
            seed,
            start_timesteps,
            total_timesteps,
            self.start_method,
        )
        host = _HostState(actor, name, ranks, last_sync=time.monotonic())
        host.published_versions = dict(self._versions)  # it starts with the values of its specs
        self._hosts.append(host)
        for rank in ranks:
            self._host_of[rank] = host
        return host

    # --- Runtime -----------------------------------------------------------------------------------------------------

    def start(self, specs: Sequence[WorkerSpec], seed: int, start_timesteps: int, total_timesteps: int) -> None:
        if not specs:
            raise ValueError("At least one worker spec is needed")
        started = time.monotonic()
        self._specs, self._run = list(specs), (seed, start_timesteps, total_timesteps)
        first = specs[0].shared
        self._synced = [tensor for name in specs[0].synced for tensor in entry_tensors(first[name])]
        self._averaged = [tensor for name in specs[0].averaged for tensor in entry_tensors(first[name])]
        self._owned = [group for name in specs[0].owned for group in seqlock_groups(first[name])]
        self._published = {name: entry_tensors(first[name]) for name in specs[0].published}
        self._versions = {name: 0 for name in self._published}
        try:
            self._connect(len(specs))
            for ranks in self._groups(len(specs)):
                for rank in ranks:
                    self._generations[rank] = 0
                self._start_host(ranks, seed)
            self._wait_running(self._hosts)
        except BaseException:
            self.close()
            raise
        self.startup_seconds = time.monotonic() - started

    def _wait_running(self, hosts: list[_HostState]) -> None:
        """Wait for ``hosts`` to run (actor creation failures surface here, not in the first poll)."""
        ray = self._ray
        try:
            node_ids = ray.get([host.actor.node_id.remote() for host in hosts], timeout=self.start_timeout)
        except ray.exceptions.GetTimeoutError:
            asked = max(len(host.ranks) for host in hosts) * self.num_cpus_per_worker
            raise TimeoutError(
                f"Ray did not start the workers' actors within {self.start_timeout} s: each asks for {asked} CPUs"
                f" (num_cpus_per_worker={self.num_cpus_per_worker}), the cluster has {ray.cluster_resources().get('CPU', 0)}"
                " in all; lower num_cpus_per_worker or workers_per_actor, or add nodes"
            ) from None
        for host, node_id in zip(hosts, node_ids):
            host.node_id = node_id

    def worker_nodes(self) -> dict[int, str | None]:
        """The Ray node id each worker runs on."""
        return {rank: host.node_id for rank, host in self._host_of.items()}

    def _issue(self) -> None:
        """Give every live host one exchange in flight (the bound on requests in flight per host)."""
        now = time.monotonic()
        for name in list(self._dirty):  # one ray.put per change, shared by every host
            tensors = self._published[name]
            large = sum(tensor.numel() * tensor.element_size() for tensor in tensors) > _SMALL_ENTRY_BYTES
            if large and now - self._last_put.get(name, -math.inf) < self.publish_interval:
                continue
            self._refs[name] = self._ray.put([tensor.detach().numpy() for tensor in tensors])
            self._versions[name] += 1
            self._last_put[name] = now
            self._dirty.discard(name)
        total = self.steps()
        for host in self._hosts:
            if not host.alive or host.done or host.inflight is not None:
                continue
            published = {}
            for name, version in self._versions.items():
                if host.published_versions.get(name, 0) < version:
                    published[name] = [self._refs[name]]
                    host.published_versions[name] = version
            # While pausing, every exchange syncs: the driver's copy (what an evaluation scores, and what a stop
            # requested during it returns) then holds every change made before the workers parked.
            sync = self._syncs() and (now - host.last_sync >= self.sync_interval or host.finished or self._stop or self._pause)
            global_values = [tensor.detach().numpy() for tensor in self._synced] if sync else None
            owned = [read_rows(group) for group in self._owned] if sync else None
            if sync:
                host.last_sync = now
            host.inflight_pause, host.inflight_synced = self._pause, sync
            host.inflight = host.actor.exchange.remote(
                self._stop, self._pause, total - host.steps, published, global_values, self.exchange_wait, owned
            )

    def _syncs(self) -> bool:
        """Whether the specs have entries the hosts and the driver exchange every ``sync_interval``."""
        return bool(self._synced or self._averaged or self._owned)

    def _host_lost(self, host: _HostState, error: BaseException) -> None:
        host.alive, host.inflight = False, None
        self._retired_steps += host.steps
        host.steps = 0
        where = f" on node {host.node_id}" if host.node_id else ""
        for rank in host.ranks:
            if self._host_of.get(rank) is host and rank not in self._failed:
                self._failed.add(rank)
                reason = f"The Ray actor {host.name} running it{where} was lost: {type(error).__name__}: {error}"
                self._errors.append(WorkerError(rank, self._specs[rank].name, None, reason, lost=True))

    def _receive(self, host: _HostState, reply: dict[str, Any]) -> list[tuple[int, str, Any]]:
        host.inflight = None
        host.steps = int(reply["steps"])
        synced_or_none = host.inflight_synced or not self._syncs()
        host.parked = bool(reply["parked"]) and host.inflight_pause and synced_or_none
        host.finished = bool(reply["finished"])
        if reply["changes"] is not None:
            for tensor, change in zip(self._synced, reply["changes"]):
                tensor.detach().numpy()[...] += change  # the synced entries live on the CPU (shared memory)
        if reply["averaged"] is not None:
            host.averaged = reply["averaged"]
            copies = [other.averaged for other in self._hosts if other.averaged is not None]
            for i, tensor in enumerate(self._averaged):
                tensor.detach().numpy()[...] = np.mean([copy[i] for copy in copies], axis=0)
        if reply["owned"] is not None:
            rows = np.asarray(host.ranks) + 1
            for group, values in zip(self._owned, reply["owned"]):
                write_rows(group, rows, values)
        if host.finished and (host.inflight_synced or not self._syncs()):
            host.done = True
        stale, host.restarted = host.restarted, set()  # this reply left the host before those restarts
        for rank, name, exitcode, worker_traceback in reply["errors"]:
            if rank not in self._failed and rank not in stale:
                self._failed.add(rank)
                self._errors.append(WorkerError(rank, name, exitcode, worker_traceback))
        return list(reply["messages"])

    def _exchange(self, timeout: float) -> list[tuple[int, str, Any]]:
        """One round: issue the exchanges, wait up to ``timeout`` for the first reply, take every ready one."""
        ray = self._ray
        self._issue()
        by_ref = {host.inflight: host for host in self._hosts if host.inflight is not None}
        if not by_ref:
            time.sleep(timeout)
            return []
        out: list[tuple[int, str, Any]] = []
        for ref in wait_ready(ray, list(by_ref), timeout):
            host = by_ref[ref]
            try:
                reply = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
                self._host_lost(host, error)
                continue
            out += self._receive(host, reply)
        return out

    def poll(self, timeout: float) -> list[tuple[int, str, Any]]:
        out, self._held = self._held, []
        out += self._exchange(timeout)
        if self._errors:
            self._held = out
            raise self._errors.popleft()
        return out

    def local_workers(self) -> int:
        """All of them when the Ray instance is ours (started on this machine by :meth:`start`); 0 on a cluster we
        joined, where the workers' nodes are Ray's choice."""
        return len(self._specs) if self._owns_ray else 0

    def steps(self) -> int:
        return self._retired_steps + sum(host.steps for host in self._hosts if host.alive)

    def running(self) -> bool:
        return any(host.alive and not host.done for host in self._hosts)

    def request_stop(self) -> None:
        self._stop = True

    def pause(self, timeout: float = 30.0) -> None:
        self._pause = True
        for host in self._hosts:
            host.parked = False
        deadline = time.monotonic() + timeout
        while True:
            self._held += self._exchange(0.01)
            if self._errors:
                raise self._errors.popleft()
            if all(host.parked or host.finished or not host.alive for host in self._hosts):
                return
            if time.monotonic() > deadline:
                self.resume()
                raise TimeoutError(f"The workers did not pause within {timeout} s")

    def resume(self) -> None:
        self._pause = False

    def publish(self, name: str) -> None:
        if name not in self._published:
            raise ValueError(f"Invalid name={name!r}: the specs publish {sorted(self._published)}")
        self._dirty.add(name)

    def restart(self, rank: int) -> None:
        host = self._host_of.get(rank)
        if host is None:
            raise ValueError(f"Invalid rank={rank!r}: this runtime runs workers 0..{len(self._specs) - 1}")
        self._failed.discard(rank)
        self._generations[rank] += 1
        if host.alive:
            if host.inflight is not None:
                host.restarted.add(rank)
            self._ray.get(host.actor.restart.remote(rank))
            host.finished = host.done = False
            return
        # Its host is gone (killed actor, lost node): a new host for this worker alone, placed where Ray finds room.
        seed = restart_seed(self._run[0], len(self._specs), self._generations[rank])
        self._wait_running([self._start_host([rank], seed)])

    def close(self, timeout: float = 5.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.request_stop()
        ray = self._ray
        if ray.is_initialized():
            # Let the workers finish and the hosts send their last changes, then kill every host we started.
            deadline = time.monotonic() + timeout
            while self.running() and time.monotonic() < deadline:
                with contextlib.suppress(WorkerError):
                    self.poll(0.05)
            closing = [host.actor.close.remote() for host in self._hosts if host.alive]
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=max(1.0, deadline - time.monotonic()))
        actors = [host.actor for host in self._hosts]
        release_ray(ray, actors, f"sb3_async-{self._run_id}-", self._owns_ray, timeout=max(10.0, timeout))
        self._hosts, self._host_of = [], {}
