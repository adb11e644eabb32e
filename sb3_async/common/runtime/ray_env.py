"""Torch-free Ray pieces: the rules every use of Ray in sb3_async follows to connect and to leave, and the Ray hosts of
:class:`~sb3_async.common.env_pool.AsyncEnvPool` (``backend="ray"``).

Connecting (:func:`connect_ray`, shared with :class:`~sb3_async.common.runtime.ray_backend.RayRuntime`): a Ray already
initialized in this process is used as it is and never shut down by us; else ``ray.init`` connects to ``address`` (or
``RAY_ADDRESS``), or starts a local Ray; either way we called ``ray.init``, so :func:`release_ray` calls
``ray.shutdown()`` (which stops a local Ray, and only disconnects from a cluster). Our actors are named in the
``sb3_async`` namespace and owned by the driver: :func:`release_ray` kills them and waits until the cluster lists none
(Ray also removes them if the driver dies).

Env hosts: each group of the pool's envs (the ``np.array_split`` groups of the process workers) lives in one Ray actor,
:class:`RayEnvHost`, which wraps the pool's own ``EnvWorker`` (same step / reset / call code, same autoreset and
``on_error`` handling, same tracebacks) and answers each command as the process worker does, the observations of the
envs it stepped added to the reply as NumPy arrays (no shared memory between machines). :class:`RayEnvHosts` is the
driver's side: one remote call per command, answered in order per host (a Ray actor runs one caller's calls in
order), ``ray.wait`` on the oldest call of each busy host, and the observations written into the pool's observation
slots as each reply is read, so the pool's logic is the same for both engines. This module imports neither torch nor
gymnasium (the env worker is imported inside the actor), so neither do the env hosts unless the envs do.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
import uuid
import warnings
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle

from sb3_async.common.validation import check_nonnegative

if TYPE_CHECKING:
    from sb3_async.common.env_worker import SharedObs

RAY_INSTALL_HINT = 'backend="ray" needs Ray: pip install "sb3-async[ray]"'
NAMESPACE = "sb3_async"


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` saying what to install."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_INSTALL_HINT) from error
    return ray


def connect_ray(ray: Any, address: str | None, init_kwargs: dict[str, Any] | None, num_cpus: float) -> bool:
    """Make sure this process is connected to Ray (the module docstring gives the rules).

    :param ray: the ``ray`` module
    :param address: the cluster to connect to; default ``RAY_ADDRESS``, else a local Ray
    :param init_kwargs: more ``ray.init`` arguments (a local Ray gets ``num_cpus`` and no dashboard unless given here)
    :param num_cpus: Ray CPUs the caller's actors ask for: a local Ray gets at least as many
    :return: whether we called ``ray.init`` (then :func:`release_ray` calls ``ray.shutdown()``)
    """
    if ray.is_initialized():
        return False  # the user's Ray: never shut down by us
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = dict(init_kwargs or {})
    if address:
        kwargs["address"] = address
    else:
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, math.ceil(num_cpus)))
        kwargs.setdefault("include_dashboard", False)  # nothing listening that runs code (ShadowRay, DESIGN §5)
    kwargs.setdefault("log_to_driver", True)
    ray.init(**kwargs)
    return True


def our_actor_names(ray: Any, prefix: str) -> list[str]:
    """Names of the actors of the ``sb3_async`` namespace starting with ``prefix`` that the cluster lists."""
    return [
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor.get("namespace") == NAMESPACE and actor["name"].startswith(prefix)
    ]


def release_ray(ray: Any, actors: Sequence[Any], prefix: str, owns_ray: bool, timeout: float) -> None:
    """Kill ``actors``, wait until the cluster lists no actor named ``prefix...`` (``ray.kill`` only asks: a user's
    long-lived cluster must have none of ours once we return; bounded by ``timeout``, a lagging cluster gets a
    warning), then shut down a Ray we initialized (``owns_ray``)."""
    if ray.is_initialized():
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        deadline = time.monotonic() + timeout
        left: list[str] = []
        while time.monotonic() < deadline:
            try:
                left = our_actor_names(ray, prefix)
            except Exception:  # the cluster went away: nothing of ours can be left in it
                left = []
            if not left:
                break
            time.sleep(0.05)
        if left:
            warnings.warn(f"Ray still lists actors of this run {timeout} s after they were killed: {left}", stacklevel=3)
    if owns_ray:
        ray.shutdown()


def wait_ready(ray: Any, refs: list[Any], timeout: float | None) -> list[Any]:
    """The refs among ``refs`` that have finished: wait up to ``timeout`` seconds (None: no limit) for the first, then
    take every other one already finished."""
    done, rest = ray.wait(refs, num_returns=1, timeout=timeout)
    if done and rest:
        done += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
    return done


class RayEnvHost:
    """A Ray actor holding one group of an :class:`~sb3_async.common.env_pool.AsyncEnvPool`'s envs.

    :param ids: the env ids of the group
    :param factories_blob: their factories, cloudpickled
    :param autoreset: the pool's ``autoreset``
    :param on_error: the pool's ``on_error``
    """

    def __init__(self, ids: list[int], factories_blob: bytes, autoreset: bool, on_error: str):
        from sb3_async.common.env_worker import EnvWorker  # here, so that RayRuntime's import of this module stays light

        self._fatal: str | None = None
        try:
            self._worker = EnvWorker(ids, cloudpickle.loads(factories_blob), autoreset, on_error)
        except Exception:  # reported by the first call, as a process worker reports it ("fatal", its traceback)
            self._fatal = traceback.format_exc()

    def node_id(self) -> str:
        """The Ray node this host runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def handle(self, command: str, data: Any) -> tuple[str, Any, Any]:
        """Serve one command of the pool as the process worker does (``env_worker_main``).

        :return: ``(kind, reply, observations)``; ``observations`` is ``(ids, arrays)`` of the envs a ``step`` or a
            ``reset`` wrote (None otherwise); ``("fatal", traceback, None)`` if the host cannot serve
        """
        if self._fatal is not None:
            return "fatal", self._fatal, None
        try:
            worker = self._worker
            if command == "spaces":
                return "spaces", [(i, env.observation_space, env.action_space) for i, env in worker.envs.items()], None
            if command == "obs":  # the driver's observation slots of this group: a (re)started host starts from them
                from sb3_async.common.env_worker import SharedObs

                n_envs, observations = data
                worker.obs = SharedObs(worker.envs[worker.ids[0]].observation_space, n_envs)  # untouched pages cost nothing
                worker.obs.write(worker.ids, observations)
                return "obs", None, None
            if command in ("step", "reset"):
                results, errors = worker.step(data) if command == "step" else worker.reset(data)
                ids = [result[0] for result in results]
                assert worker.obs is not None
                return command, (results, errors), (ids, worker.obs.read(ids)) if ids else None
            if command == "call":
                return "call", worker.call(*data), None
            if command == "close":
                for env in worker.envs.values():
                    env.close()
                return "closed", None, None
            raise ValueError(f"Unknown command {command!r}")
        except Exception:
            self._fatal = traceback.format_exc()
            return "fatal", self._fatal, None


class RayEnvHosts:
    """The driver's side of an :class:`~sb3_async.common.env_pool.AsyncEnvPool`'s Ray hosts (``backend="ray"``).

    Holds no reference to the pool, so that the pool's finalizer can close it.

    :param n_hosts: number of hosts (the pool's ``n_workers``)
    :param address: the Ray cluster (default ``RAY_ADDRESS``, else a Ray initialized in this process, else a local Ray
        started for the pool and shut down at its close)
    :param init_kwargs: more arguments for ``ray.init`` when we call it
    :param num_cpus_per_worker: Ray CPUs reserved per host (1: each host is one busy process)
    :param start_timeout: seconds to wait for a host to start (Ray waits forever for CPUs the cluster lacks: we raise a
        ``TimeoutError`` saying what was asked instead)
    """

    def __init__(
        self,
        n_hosts: int,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        num_cpus_per_worker: float = 1.0,
        start_timeout: float = 300.0,
    ):
        if address is not None and not isinstance(address, str):
            raise TypeError(f"Invalid address={address!r}: expected a Ray address string or None")
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise TypeError(f"Invalid init_kwargs={init_kwargs!r}: expected a dict or None")
        self.num_cpus_per_worker = check_nonnegative("num_cpus_per_worker", num_cpus_per_worker)
        self.start_timeout = check_nonnegative("start_timeout", start_timeout)
        self._ray = import_ray()
        self._prefix = f"sb3_async-env-pool-{uuid.uuid4().hex[:8]}-"
        self._actors: list[Any] = [None] * n_hosts
        self._names = [""] * n_hosts
        self._calls: list[deque[Any]] = [deque() for _ in range(n_hosts)]  # replies not read yet, oldest first
        self._starting = [False] * n_hosts
        self._generation = [0] * n_hosts
        self._actor_class: Any = None
        self._obs: SharedObs | None = None
        self._closed = False
        self._owns_ray = connect_ray(self._ray, address, init_kwargs, n_hosts * self.num_cpus_per_worker)

    def start(self, w: int, ids: list[int], factories_blob: bytes, autoreset: bool, on_error: str) -> None:
        """Start host ``w``; its first reply is its envs' spaces (the process worker's handshake)."""
        ray = self._ray
        if self._actor_class is None:
            self._actor_class = ray.remote(RayEnvHost)
        name = f"{self._prefix}host-{w}-{self._generation[w]}"
        self._generation[w] += 1
        actor = self._actor_class.options(
            name=name,
            namespace=NAMESPACE,
            num_cpus=self.num_cpus_per_worker,
            scheduling_strategy="SPREAD",
            max_restarts=0,  # restarts are the pool's (on_error="restart"): it knows which envs to report truncated
        ).remote(ids, factories_blob, autoreset, on_error)
        self._actors[w], self._names[w], self._starting[w] = actor, name, True
        self._calls[w] = deque([actor.handle.remote("spaces", None)])

    def share(self, w: int, obs: SharedObs, ids: list[int]) -> None:
        """Give host ``w`` the driver's observation slots of its envs (``ids``); replies are written into ``obs``."""
        self._obs = obs
        self._actors[w].handle.remote("obs", (obs.n_envs, obs.read(ids)))  # no reply: the host runs it before the next

    def send(self, w: int, message: tuple[str, Any]) -> None:
        """Start ``message`` (a command and its data) on host ``w``; its reply is read by :meth:`receive`."""
        self._calls[w].append(self._actors[w].handle.remote(*message))

    def receive(self, w: int, timeout: float | None) -> tuple[str, Any]:
        """The reply to host ``w``'s oldest command: ``(kind, data)``, ``("died", why)`` if the host is lost.

        :raises TimeoutError: no reply within ``timeout`` seconds (the call stays in flight)
        """
        ray = self._ray
        ref = self._calls[w][0]
        starting = self._starting[w]
        try:
            kind, data, observations = ray.get(ref, timeout=self.start_timeout if starting and timeout is None else timeout)
        except ray.exceptions.GetTimeoutError:
            if starting and timeout is None:
                raise TimeoutError(
                    f"Ray did not start the env host {self._names[w]} within {self.start_timeout} s: each host asks for"
                    f" {self.num_cpus_per_worker} CPUs (num_cpus_per_worker), the cluster has"
                    f" {ray.cluster_resources().get('CPU', 0)} in all; lower num_cpus_per_worker or n_workers, or add nodes"
                ) from None
            raise TimeoutError from None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
            self._calls[w].popleft()
            return "died", f"The Ray actor {self._names[w]} holding it was lost: {type(error).__name__}: {error}"
        except ray.exceptions.RayTaskError as error:  # the reply could not be sent (an unpicklable info, say)
            self._calls[w].popleft()
            return "fatal", str(error)
        self._calls[w].popleft()
        self._starting[w] = False
        if observations is not None:
            assert self._obs is not None
            self._obs.write(*observations)
        return kind, data

    def ready(self, hosts: Sequence[int], timeout: float | None) -> list[int]:
        """The hosts among ``hosts`` (each with a command in flight) whose oldest command has finished, waiting up to
        ``timeout`` seconds (None: no limit) for the first."""
        by_ref = {self._calls[w][0]: w for w in hosts}
        return [by_ref[ref] for ref in wait_ready(self._ray, list(by_ref), timeout)]

    def node_ids(self) -> list[str]:
        """The Ray node each host runs on."""
        return [str(node) for node in self._ray.get([actor.node_id.remote() for actor in self._actors])]

    def kill(self, w: int) -> None:
        """Kill host ``w`` (before starting it again); its commands in flight are dropped."""
        with contextlib.suppress(Exception):
            self._ray.kill(self._actors[w], no_restart=True)
        self._calls[w].clear()

    def close(self, timeout: float = 5.0) -> None:
        """Close the envs of the idle hosts (up to ``timeout`` seconds), kill every host, wait until the cluster lists
        none, and shut down a Ray started here. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        actors = [actor for actor in self._actors if actor is not None]
        if ray.is_initialized():
            closing = [
                actor.handle.remote("close", None)
                for actor, calls in zip(self._actors, self._calls)
                if actor is not None and not calls  # a busy host would close its envs only after its step
            ]
            with contextlib.suppress(Exception):
                if closing:
                    ray.wait(closing, num_returns=len(closing), timeout=timeout)
        release_ray(ray, actors, self._prefix, self._owns_ray, timeout=max(10.0, timeout))
        self._actors = [None] * len(self._actors)
