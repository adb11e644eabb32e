"""The pool's Ray hosts (``backend="ray"``): each group of envs lives in one Ray actor, anywhere in a Ray cluster.

:class:`RayEnvHost` wraps the pool's own :class:`~sb3_async.env_pool.host.EnvHost` (same step / reset / call code,
same autoreset and ``on_error`` handling, same tracebacks) over buffers of its own, and answers each command as a host
process does, with the results of the envs it stepped (observations, rewards, flags) in the reply: no shared memory
between machines. :class:`RayEnvHosts` is the driver's side, with the interface of
:class:`~sb3_async.env_pool.process_hosts.ProcessHosts`: one remote call per command, answered in order per host (a Ray
actor runs one caller's calls in order), ``ray.wait`` on the oldest call of each busy host, and each reply's results
written into the pool's buffers as it is read, so the pool's logic is the same for both backends. This module imports
neither torch nor gymnasium (the env host is imported inside the actor).
"""

from __future__ import annotations

import contextlib
import traceback
import uuid
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle

from sb3_async.runtime import ray_connect
from sb3_async.runtime.processes import Launcher
from sb3_async.validation import check_nonnegative

if TYPE_CHECKING:
    from sb3_async.env_pool.shared_buffers import SharedBuffers

__all__ = ["RayEnvHost", "RayEnvHosts"]


class RayEnvHost:
    """A Ray actor holding one group of an :class:`~sb3_async.env_pool.AsyncEnvPool`'s envs.

    :param ids: the env ids of the group
    :param factories_blob: their factories, cloudpickled
    :param autoreset: the pool's ``autoreset``
    :param on_error: the pool's ``on_error``
    """

    def __init__(self, ids: list[int], factories_blob: bytes, autoreset: bool, on_error: str):
        from sb3_async.env_pool.host import EnvHost  # in the actor: the driver's import of this module stays light

        self._fatal: str | None = None
        try:
            self._host = EnvHost(ids, cloudpickle.loads(factories_blob), autoreset, on_error)
        except Exception:  # reported by the first call, as a process host reports it ("fatal", its traceback)
            self._fatal = traceback.format_exc()

    def node_id(self) -> str:
        """The Ray node this host runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def handle(self, command: str, data: Any) -> tuple[str, Any, Any]:
        """Serve one command of the pool as a host process does.

        :return: ``(kind, reply, results)``; ``results`` holds what a ``step`` (ids, observations, rewards,
            terminations, truncations) or a ``reset`` (ids, observations) wrote in the buffers; ``("fatal", traceback,
            None)`` if the host cannot serve
        """
        if self._fatal is not None:
            return "fatal", self._fatal, None
        try:
            host = self._host
            if command == "spaces":
                return "spaces", host.spaces, None
            if command == "buffers":  # the driver's rows of this group: a (re)started host starts from them
                from sb3_async.env_pool.shared_buffers import SharedBuffers

                n_envs, observations = data
                env = host.envs[host.ids[0]]
                host.buffers = SharedBuffers(env.observation_space, env.action_space, n_envs)  # untouched pages: free
                host.buffers.obs.write(host.ids, observations)
                return "buffers", None, None
            buffers = host.buffers
            assert buffers is not None
            if command == "step":
                ids, actions, restarts = data
                ids = host.ids if ids is None else ids
                buffers.actions.write(ids, actions)
                infos, errors = host.step(ids, restarts)
                done = [i for i in ids if i not in errors]
                results = (
                    done,
                    buffers.obs.read(done),
                    buffers.rewards[done],
                    buffers.terminated[done],
                    buffers.truncated[done],
                )
                return "step", (infos, errors), results if done else None
            if command == "reset":
                infos, errors = host.reset(data)
                done = list(infos)
                return "reset", (infos, errors), (done, buffers.obs.read(done)) if done else None
            if command == "call":
                return "call", host.call(*data), None
            if command == "close":
                host.close()
                return "closed", None, None
            raise ValueError(f"Unknown command {command!r}")
        except Exception:
            self._fatal = traceback.format_exc()
            return "fatal", self._fatal, None


class RayEnvHosts:
    """The driver's side of an :class:`~sb3_async.env_pool.AsyncEnvPool`'s Ray hosts (``backend="ray"``).

    Holds no reference to the pool, so that the pool's finalizer can close it.

    :param n_hosts: number of hosts (the pool's ``n_hosts``)
    :param autoreset: the pool's ``autoreset``
    :param on_error: the pool's ``on_error``
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
        autoreset: bool,
        on_error: str,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        num_cpus_per_worker: float = 1.0,
        start_timeout: float = 300.0,
    ):
        ray_connect.check_connect_options(address, init_kwargs)
        self.num_cpus_per_worker = check_nonnegative("num_cpus_per_worker", num_cpus_per_worker)
        self.start_timeout = check_nonnegative("start_timeout", start_timeout)
        self.autoreset, self.on_error = autoreset, on_error
        self._ray = ray_connect.import_ray()
        self._prefix = f"sb3_async-env-pool-{uuid.uuid4().hex[:8]}-"
        self._actors: list[Any] = [None] * n_hosts
        self._names = [""] * n_hosts
        self._host_ids: list[list[int]] = [[] for _ in range(n_hosts)]
        self._calls: list[deque[Any]] = [deque() for _ in range(n_hosts)]  # replies not read yet, oldest first
        self._starting = [False] * n_hosts
        self._generation = [0] * n_hosts
        self._buffers: SharedBuffers | None = None
        self._closed = False
        self._owns_ray = ray_connect.connect_ray(self._ray, address, init_kwargs, n_hosts * self.num_cpus_per_worker)

    def start(self, h: int, ids: list[int], factories_blob: bytes) -> None:
        """Start host ``h``; its first reply is its envs' spaces (a host process's handshake)."""
        name = f"{self._prefix}host-{h}-{self._generation[h]}"
        self._generation[h] += 1
        # restarts are the pool's (on_error="restart"): it knows which envs to report truncated
        actor = Launcher.actor(
            self._ray, RayEnvHost, name, self.num_cpus_per_worker, ids, factories_blob, self.autoreset, self.on_error
        )
        self._actors[h], self._names[h], self._starting[h], self._host_ids[h] = actor, name, True, ids
        self._calls[h] = deque([actor.handle.remote("spaces", None)])

    def share(self, h: int, buffers: SharedBuffers, ids: list[int]) -> None:
        """Give host ``h`` the driver's rows of its envs (``ids``: the slots of a multi-agent env's copies); replies are
        written into ``buffers``."""
        self._buffers, self._host_ids[h] = buffers, ids
        self._calls[h].append(self._actors[h].handle.remote("buffers", (buffers.n_envs, buffers.obs.read(ids))))
        self.receive(h, None)

    def step(self, h: int, ids: list[int] | None, restarts: dict[int, str] | None, buffers: SharedBuffers) -> None:
        """Start a step of host ``h``'s envs ``ids`` (None: all of them) with their actions in ``buffers``."""
        self._buffers = buffers
        rows = ids if ids is not None else self._host_ids[h]
        self._calls[h].append(self._actors[h].handle.remote("step", (ids, buffers.actions.read(rows), restarts)))

    def send(self, h: int, message: tuple[str, Any]) -> None:
        """Start ``message`` (a command and its data) on host ``h``; its reply is read by :meth:`receive`."""
        self._calls[h].append(self._actors[h].handle.remote(*message))

    def receive(self, h: int, timeout: float | None) -> tuple[str, Any]:
        """The reply to host ``h``'s oldest command: ``(kind, data)``, ``("died", why)`` if the host is lost.

        :raises TimeoutError: no reply within ``timeout`` seconds (the call stays in flight)
        """
        ray = self._ray
        ref = self._calls[h][0]
        starting = self._starting[h]
        try:
            kind, data, results = ray.get(ref, timeout=self.start_timeout if starting and timeout is None else timeout)
        except ray.exceptions.GetTimeoutError:
            if starting and timeout is None:
                raise TimeoutError(
                    f"Ray did not start the env host {self._names[h]} within {self.start_timeout} s: each host asks for"
                    f" {self.num_cpus_per_worker} CPUs (num_cpus_per_worker), the cluster has"
                    f" {ray.cluster_resources().get('CPU', 0)} in all; lower num_cpus_per_worker or n_hosts, or add nodes"
                ) from None
            raise TimeoutError from None
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as error:
            self._calls[h].popleft()
            return "died", f"The Ray actor {self._names[h]} holding it was lost: {type(error).__name__}: {error}"
        except ray.exceptions.RayTaskError as error:  # the reply could not be sent (an unpicklable info, say)
            self._calls[h].popleft()
            return "fatal", str(error)
        self._calls[h].popleft()
        self._starting[h] = False
        if results is not None:
            buffers = self._buffers
            assert buffers is not None
            buffers.obs.write(results[0], results[1])
            if kind == "step":
                done = results[0]
                buffers.rewards[done], buffers.terminated[done], buffers.truncated[done] = results[2:]
        return kind, data

    def ready(self, hosts: Sequence[int], timeout: float | None) -> list[int]:
        """The hosts among ``hosts`` (each with a command in flight) whose oldest command has finished, waiting up to
        ``timeout`` seconds (None: no limit) for the first."""
        by_ref = {self._calls[h][0]: h for h in hosts}
        return [by_ref[ref] for ref in ray_connect.wait_ready(self._ray, list(by_ref), timeout)]

    def exitcode(self, h: int) -> int | None:
        """None: a Ray host has no exit code the driver can see."""
        return None

    def pid(self, h: int) -> int | None:
        return None

    def actor(self, h: int) -> Any:
        """Host ``h``'s Ray actor handle."""
        return self._actors[h]

    def node_ids(self) -> list[str]:
        """The Ray node each host runs on."""
        return [str(node) for node in self._ray.get([actor.node_id.remote() for actor in self._actors])]

    def kill(self, h: int) -> None:
        """Kill host ``h`` (before starting it again); its commands in flight are dropped."""
        with contextlib.suppress(Exception):
            self._ray.kill(self._actors[h], no_restart=True)
        self._calls[h].clear()

    def closer(self) -> tuple[Any, tuple[Any, ...]]:
        """A function and its arguments that close the hosts (a finalizer's)."""
        return RayEnvHosts.close, (self,)

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
        ray_connect.release_ray(ray, actors, self._prefix, self._owns_ray, timeout=max(10.0, timeout))
        self._actors = [None] * len(self._actors)
