"""Torch-free Ray rules every use of Ray in sb3_async follows to connect and to leave: the algorithms'
:class:`~sb3_async.runtime.ray_backend.RayRuntime` and the env pool's Ray hosts
(:mod:`sb3_async.env_pool.ray_hosts`).

Connecting (:func:`connect_ray`): a Ray already initialized in this process is used as it is and never shut down by us;
else ``ray.init`` connects to ``address`` (or ``RAY_ADDRESS``), or starts a local Ray of the run's own (``address="local"``:
never a cluster Ray would find by itself, such as the last ``ray start`` of this machine, whose address file may be
stale); either way we called ``ray.init``,
so :func:`release_ray` calls ``ray.shutdown()`` (which stops a local Ray, and only disconnects from a cluster). Our actors
are named in the ``sb3_async`` namespace and owned by the driver: :func:`release_ray` kills them and waits until the
cluster lists none (Ray also removes them if the driver dies). This module imports neither torch nor gymnasium.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

from sb3_async.runtime.processes import RAY_NAMESPACE, Launcher

RAY_INSTALL_HINT = 'backend="ray" needs Ray: pip install "sb3-async[ray]"'
NAMESPACE = RAY_NAMESPACE  # our actors' Ray namespace


def import_ray() -> Any:
    """The ``ray`` module, or an ``ImportError`` saying what to install."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_INSTALL_HINT) from error
    return ray


def check_connect_options(address: Any, init_kwargs: Any) -> None:
    """``TypeError`` unless ``address`` is a string or None and ``init_kwargs`` a dict or None (what
    :func:`connect_ray` takes), checked when the options are given rather than at the first connection."""
    if address is not None and not isinstance(address, str):
        raise TypeError(f"Invalid address={address!r}: expected a Ray address string or None")
    if init_kwargs is not None and not isinstance(init_kwargs, dict):
        raise TypeError(f"Invalid init_kwargs={init_kwargs!r}: expected a dict or None")


def connect_ray(ray: Any, address: str | None, init_kwargs: dict[str, Any] | None, num_cpus: float) -> bool:
    """Make sure this process is connected to Ray (the module docstring gives the rules).

    :param ray: the ``ray`` module
    :param address: the cluster to connect to (``"auto"``: the one ``ray start`` started on this machine); default
        ``RAY_ADDRESS``, else a local Ray of this run's own
    :param init_kwargs: more ``ray.init`` arguments (a local Ray gets ``num_cpus`` and no dashboard unless given here)
    :param num_cpus: Ray CPUs the caller's actors ask for: a local Ray gets at least as many
    :return: whether we called ``ray.init`` (then :func:`release_ray` calls ``ray.shutdown()``)
    """
    if ray.is_initialized():
        return False  # the user's Ray: never shut down by us
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs = dict(init_kwargs or {})
    kwargs["address"] = address
    if address == "local":
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, math.ceil(num_cpus)))
        kwargs.setdefault("include_dashboard", False)  # nothing listening that runs code (ShadowRay, DESIGN §5)
    kwargs.setdefault("log_to_driver", True)
    Launcher.ray_cluster(ray, **kwargs)
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
