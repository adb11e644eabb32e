"""Where the envs live: a group of envs and the commands it serves, and the entry point of an env host process.

- :class:`EnvHost`: a group of envs stepped with the actions in the pool's :class:`~sb3_async.env_pool.shared_buffers.
  SharedBuffers`, their results written back there, with the same-step autoreset (:data:`FINAL_OBS`,
  :data:`FINAL_INFO`) and the ``on_error`` handling. The same class serves the envs the pool keeps in its own process,
  its host processes and its Ray hosts.
- :func:`env_host_main`: the entry point of an env host process. A step costs one byte each way on its pipe (the
  infos that are not empty travel with the reply, packed when they are numbers: :mod:`~sb3_async.env_pool.info_codec`);
  rare commands (``reset``, ``call``, ``close``) are pickled.

This module does not import torch, so neither do the env hosts.
"""

from __future__ import annotations

import contextlib
import copy
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from sb3_async.env_pool.info_codec import InfoPacker
from sb3_async.env_pool.multi_agent import AgentSlots, as_agent_slots, is_multi_agent
from sb3_async.env_pool.shared_buffers import FINAL_INFO, FINAL_OBS, OBJECTS, SharedBuffers
from sb3_async.runtime.processes import report_and_exit, watch_parent

__all__ = [
    "STEP",
    "EnvFactory",
    "EnvHost",
    "EnvTraceback",
    "Missing",
    "copy_info",
    "env_host_main",
    "format_error",
    "step_message",
]

EnvFactory = Callable[[], gym.Env]
#: First byte of a step command to a host process (a pickle starts with b"\x80", so it cannot be one).
STEP = b"S"


class EnvTraceback(str):
    """A traceback formatted in the host, which also names the type of the exception it ends with
    (:attr:`raised`, ``"module.qualname"``: a name, so that it unpickles where that module is not imported)."""

    raised: str = ""


def format_error() -> EnvTraceback:
    """The exception being handled: its traceback, with its type's name."""
    kind = sys.exc_info()[0]
    text = EnvTraceback(traceback.format_exc())
    text.raised = f"{kind.__module__}.{kind.__qualname__}" if kind is not None else ""
    return text


def step_message(ids: Sequence[int] | None) -> bytes:
    """The step command for a host process: step every env it holds (``ids`` None) or those in ``ids``."""
    return STEP if ids is None else STEP + np.asarray(ids, dtype=np.int32).tobytes()


#: Values an info can hold that no one can change in place: a dict of them is copied by copying the dict
_IMMUTABLE = (int, float, str, bytes, type(None), np.number, np.bool_)


def copy_info(info: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``info`` that changes to the env's own dict cannot reach (DummyVecEnv deep-copies its infos): the dict
    alone where every value is an immutable scalar (the common case, at every step), else a deep copy."""
    if all(isinstance(value, _IMMUTABLE) for value in info.values()):
        return dict(info)
    return copy.deepcopy(info)


@dataclass
class Missing:
    """A ``get_attr`` of an attribute the env does not have (raised as ``AttributeError`` in the main process)."""

    message: str


def _is_wrapped(env: gym.Env, wrapper_class: type) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


def build_env(factory: EnvFactory, i: int) -> Any:
    """Env ``i`` from its factory, as a host holds it (a PettingZoo env as :class:`AgentSlots`).

    :raises TypeError: the factory returned something that is not an env, named with what it returned
    """
    env = factory()
    if not (isinstance(env, gym.Env) or is_multi_agent(env) or all(hasattr(env, a) for a in _ENV_ATTRIBUTES)):
        shown = repr(env)
        shown = shown if len(shown) <= 200 else shown[:200] + "..."
        raise TypeError(
            f"The env factory of env {i} ({factory!r}) returned {type(env).__name__} {shown}, not an env: a factory must "
            "return a gymnasium.Env (or a PettingZoo env)"
        )
    return as_agent_slots(env)


#: What an object needs to be taken for a gymnasium env without subclassing ``gymnasium.Env``
_ENV_ATTRIBUTES = ("reset", "step", "observation_space", "action_space", "close")


def close_all(envs: Sequence[Any]) -> None:
    """Close each env of ``envs``; the first error any ``close()`` raised is raised once all have been tried."""
    first: BaseException | None = None
    for env in envs:
        try:
            env.close()
        except Exception as error:
            first = first or error
    if first is not None:
        raise first


class EnvHost:
    """A group of envs and the commands it serves.

    A multi-agent PettingZoo env (:mod:`sb3_async.env_pool.multi_agent`) is held as :class:`AgentSlots`: copy ``c`` of
    an env with ``n`` agents owns the slots ``c * n .. c * n + n - 1``, which become this group's :attr:`ids` (and
    :attr:`envs` keys, each slot mapped to its copy).

    :param ids: the pool's ids of the envs (of the env copies, for a multi-agent env)
    :param factories: one factory per env
    :param autoreset: the pool's ``autoreset``
    :param on_error: the pool's ``on_error``
    :param copy_infos: return copies of the envs' step infos (:func:`copy_info`), for a group in the pool's own process
        (a host process's infos reach the pool as copies, pickled): copied here, while the hosts step, not after
    """

    def __init__(self, ids: list[int], factories: list[EnvFactory], autoreset: bool, on_error: str, copy_infos: bool = False):
        self.autoreset, self.on_error, self.copy_infos = autoreset, on_error, copy_infos
        envs: list[Any] = []
        try:
            for i, factory in zip(ids, factories):
                envs.append(build_env(factory, i))
        except BaseException:
            with contextlib.suppress(Exception):  # the envs built before the failure: closed, their errors not the cause
                close_all(envs)
            raise
        #: slot id -> its env copy (multi-agent envs only)
        self.copies: dict[int, AgentSlots] = {}
        if any(isinstance(env, AgentSlots) for env in envs):
            ids, factories, envs = self._agent_slots(ids, factories, envs)
        self.ids, self.factories = ids, dict(zip(ids, factories))
        self.envs: dict[int, Any] = dict(zip(ids, envs))
        self.buffers: SharedBuffers | None = None

    def _agent_slots(self, ids: list[int], factories: list[EnvFactory], envs: list[Any]) -> tuple[list, list, list]:
        """The slot ids, factories and envs of multi-agent env copies ``ids`` (each copy once per agent)."""
        if not all(isinstance(env, AgentSlots) for env in envs):
            raise TypeError("The env factories mix gymnasium envs and multi-agent PettingZoo envs: give one kind")
        n = len(envs[0].names)
        slot_ids, slot_factories, slot_envs = [], [], []
        for c, factory, env in zip(ids, factories, envs):
            if env.names != envs[0].names:
                raise ValueError(f"Env copy {c} has agents {env.names}, env copy {ids[0]} has {envs[0].names}")
            env.slots, env.autoreset = [c * n + a for a in range(n)], self.autoreset
            slot_ids += env.slots
            slot_factories += [factory] * n
            slot_envs += [env] * n
            self.copies.update(dict.fromkeys(env.slots, env))
        return slot_ids, slot_factories, slot_envs

    @property
    def spaces(self) -> list[tuple[int, gym.Space, gym.Space]]:
        return [(i, env.observation_space, env.action_space) for i, env in self.envs.items()]

    def close(self) -> None:
        """Close every env; an env whose ``close()`` raises does not keep the others open (the first error is raised
        once all are closed)."""
        close_all(list({id(env): env for env in self.envs.values()}.values()))  # a multi-agent copy holds several slots

    def rebuild(self, i: int) -> None:
        with contextlib.suppress(Exception):  # the env is broken already: its replacement matters, not its close()
            self.envs[i].close()
        if i not in self.copies:
            self.envs[i] = build_env(self.factories[i], i)
            return
        env = build_env(self.factories[i], i)
        env.slots, env.autoreset = self.copies[i].slots, self.autoreset
        self.envs.update(dict.fromkeys(env.slots, env))
        self.copies.update(dict.fromkeys(env.slots, env))

    def restarted(self, i: int, error: str) -> dict[str, Any]:
        """Write the step result of env ``i``, rebuilt after ``error``: its episode ends truncated; returns its info."""
        assert self.buffers is not None
        buffers = self.buffers
        buffers.rewards[i], buffers.terminated[i], buffers.truncated[i] = 0.0, False, True
        if not self.autoreset:
            return {"error": error}
        final_obs = buffers.obs.item(i)  # the slot still holds the last observation the env gave
        obs, reset_info = self.envs[i].reset()
        buffers.obs.write(i, obs)
        return {**reset_info, FINAL_OBS: final_obs, FINAL_INFO: {}, "error": error}

    def step(self, ids: Sequence[int], restarts: dict[int, str] | None = None) -> tuple[dict[int, dict], dict[int, str]]:
        """Step the envs ``ids`` with their actions in the buffers and write their results there.

        :param restarts: envs rebuilt with a respawned host, and why: their step reports the truncation instead
        :return: ``(infos, errors)``: the infos that are not empty, and the traceback of each env that raised (its
            slots untouched)
        """
        assert self.buffers is not None
        if self.copies:
            return self._step_copies(ids, restarts)
        buffers, envs, autoreset, copy_infos = self.buffers, self.envs, self.autoreset, self.copy_infos
        rewards, terminated, truncated = buffers.scalars
        # Bound methods, looked up once: this loop is the whole cost of a step but for the envs' own
        action_of, write_obs = buffers.actions.item, buffers.obs.write
        infos: dict[int, dict] = {}
        errors: dict[int, str] = {}
        for i in ids:
            if restarts and i in restarts:
                infos[i] = self.restarted(i, restarts[i])
                continue
            try:
                env = envs[i]
                observation, reward, ended, cut, info = env.step(action_of(i))
                if autoreset and (ended or cut):
                    final_obs, final_info = observation, info
                    observation, info = env.reset()
                    info = {**info, FINAL_OBS: final_obs, FINAL_INFO: final_info}
                write_obs(i, observation)
                rewards[i], terminated[i], truncated[i] = float(reward), bool(ended), bool(cut)
                if info:
                    infos[i] = copy_info(info) if copy_infos else info
            except Exception:
                error = format_error()
                if self.on_error == "raise":
                    errors[i] = error
                    continue
                try:
                    self.rebuild(i)
                    infos[i] = self.restarted(i, error)
                except Exception:
                    errors[i] = f"{error}\nRebuilding the env then failed:\n{traceback.format_exc()}"
        return infos, errors

    def _step_copies(self, ids: Sequence[int], restarts: dict[int, str] | None) -> tuple[dict[int, dict], dict[int, str]]:
        """:meth:`step` of multi-agent env copies: each copy of ``ids`` (all its slots given; with ``autoreset=False``,
        all its live ones) steps once."""
        assert self.buffers is not None
        infos: dict[int, dict] = {}
        errors: dict[int, str] = {}
        for env in dict.fromkeys(self.copies[i] for i in ids):
            slots = env.slots
            restart = next((restarts[i] for i in slots if i in restarts), None) if restarts else None
            if restart:
                infos.update(env.restarted(self.buffers, restart))
                continue
            try:
                step_infos = env.step(self.buffers)
                if self.copy_infos:
                    step_infos = {i: copy_info(info) for i, info in step_infos.items()}
                infos.update(step_infos)
            except Exception:
                error = format_error()
                if self.on_error == "raise":
                    errors.update(dict.fromkeys(slots, error))
                    continue
                try:
                    self.rebuild(slots[0])
                    infos.update(self.copies[slots[0]].restarted(self.buffers, error))
                except Exception:
                    errors.update(dict.fromkeys(slots, f"{error}\nRebuilding the env then failed:\n{traceback.format_exc()}"))
        return infos, errors

    def reset(self, items: list[tuple[int, int | None, dict[str, Any] | None]]) -> tuple[dict[int, dict], dict[int, str]]:
        """Reset env ``i`` with ``seed`` and ``options`` for each ``(i, seed, options)``; observations into the buffers.
        A multi-agent env copy resets once, with the seed and options of its first slot in ``items``.

        :return: ``(infos, errors)``: the reset info of each env reset, the traceback of each that raised
        """
        assert self.buffers is not None
        infos: dict[int, dict] = {}
        errors: dict[int, str] = {}
        done: set[int] = set()
        for i, seed, options in items:
            if i in done:
                continue
            for attempt in range(2 if self.on_error == "restart" else 1):
                try:
                    if i in self.copies:
                        env = self.copies[i]
                        infos.update(env.reset(self.buffers, seed, options))
                        done.update(env.slots)
                    else:
                        obs, info = self.envs[i].reset(seed=seed, options=options)
                        self.buffers.obs.write(i, obs)
                        infos[i] = copy_info(info) if self.copy_infos else info
                    errors.pop(i, None)
                    break
                except Exception:
                    errors[i] = format_error()
                    if attempt == 0 and self.on_error == "restart":
                        try:
                            self.rebuild(i)
                        except Exception:
                            errors[i] += f"\nRebuilding the env then failed:\n{traceback.format_exc()}"
                            break
        return infos, errors

    def call(self, ids: list[int], what: str, name: str, args: tuple, kwargs: dict) -> tuple[list[Any], dict[int, str]]:
        """``get_attr``, ``has_attr``, ``set_attr``, ``is_wrapped``, ``render`` or a method ``call`` on each env ``ids``.

        :return: ``(values, errors)``: one value per env that answered, the traceback of each that raised
        """
        values: list[Any] = []
        errors: dict[int, str] = {}
        for i in ids:
            env = self.envs[i]
            try:
                if what == "get_attr":
                    values.append(env.get_wrapper_attr(name))
                elif what == "has_attr":
                    try:
                        env.get_wrapper_attr(name)
                        values.append(True)
                    except AttributeError:
                        values.append(False)
                elif what == "set_attr":
                    env.set_wrapper_attr(name, args[0])
                    values.append(None)
                elif what == "is_wrapped":
                    values.append(_is_wrapped(env, args[0]))
                elif what == "render":
                    values.append(env.render())
                else:
                    values.append(env.get_wrapper_attr(name)(*args, **kwargs))
            except AttributeError as error:
                if what == "get_attr":  # the parent raises AttributeError, as VecEnv callers expect
                    values.append(Missing(str(error)))
                else:
                    errors[i] = format_error()
            except Exception:
                errors[i] = format_error()
        return values, errors


def dumps(reply: Any) -> bytes:
    """A reply to the pool, pickled: with pickle (fast), or with cloudpickle when it holds what pickle cannot send, such
    as an object of a class defined in the user's ``__main__`` (a custom space, its values, an info)."""
    try:
        return pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return cloudpickle.dumps(reply)


#: How long a host of a pool whose main process steps envs too waits for its next command awake (polling) before it
#: blocks: a blocked process takes tens of microseconds to wake, as long as a cheap env's step, and there the next
#: step follows at once. 100 µs: 8 HalfCheetah-v5 in 1 host + the main process stepped 1.36-1.44x ``DummyVecEnv``,
#: against 1.17-1.19x blocking at once (3 interleaved runs on 2 cores).
SPIN_SECONDS = 100e-6


def _serve(host: EnvHost, conn: Connection, spin_seconds: float = 0.0) -> None:
    """Answer the pool's commands until it says ``close``; wait ``spin_seconds`` awake for each before blocking."""
    receive, reply = conn.recv_bytes, conn.send_bytes
    every_id = host.ids
    packer = InfoPacker()
    assert host.buffers is not None
    objects = host.buffers.obs.objects  # the observations' parts that are not arrays: they go with the infos

    def with_objects(result: tuple[dict[int, dict], dict[int, str]]) -> tuple[dict[int, dict], dict[int, str]]:
        infos, errors = result
        for i, values in host.buffers.obs.take_objects().items():  # type: ignore[union-attr]
            infos[i] = {**infos.get(i, {}), OBJECTS: values}
        return infos, errors

    poll, clock = conn.poll, time.perf_counter
    while True:
        if spin_seconds:
            deadline = clock() + spin_seconds
            while not poll(0) and clock() < deadline:
                pass
        message = receive()
        if message[:1] == STEP:
            ids = every_id if len(message) == 1 else np.frombuffer(message, dtype=np.int32, offset=1).tolist()
            infos, errors = with_objects(host.step(ids)) if objects else host.step(ids)
            if not infos and not errors:
                reply(b"")
                continue
            packed = packer.pack(infos) if not errors else None
            if isinstance(packed, bytes):
                reply(packed)
            elif packed is None:
                reply(dumps(("step", (infos, errors))))
            else:  # a new schema: announced with this step's infos
                reply(dumps(("schema", (packed, infos))))
            continue
        command, data = pickle.loads(message)
        if command == "step":  # with envs to report restarted, or actions that are not only arrays
            ids, restarts, objects = data
            for i, values in (objects or {}).items():
                host.buffers.actions.put_objects(i, values)
            reply(dumps(("step", with_objects(host.step(every_id if ids is None else ids, restarts)))))
        elif command == "reset":
            reply(dumps(("reset", with_objects(host.reset(data)))))
        elif command == "call":
            reply(dumps(("call", host.call(*data))))
        elif command == "close":
            host.close()
            conn.send(("closed", None))
            return


def env_host_main(
    index: int,
    ids: list[int],
    factories_blob: bytes,
    conn: Connection,
    parent_pid: int,
    autoreset: bool,
    on_error: str,
    spin_seconds: float = 0.0,
) -> None:
    """Entry point of an env host process: build the envs, report their spaces, map the shared buffers, serve
    (waiting ``spin_seconds`` awake for each command: :data:`SPIN_SECONDS` when the main process steps envs too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle; it closes the pool
    watch_parent(parent_pid)
    try:
        host = EnvHost(ids, cloudpickle.loads(factories_blob), autoreset, on_error)
        conn.send_bytes(dumps(("spaces", host.spaces)))
        fd = reduction.recv_handle(conn)
        env = host.envs[host.ids[0]]
        host.buffers = SharedBuffers(env.observation_space, env.action_space, conn.recv(), fd, track_objects=True)
        _serve(host, conn, spin_seconds)
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the main process is gone or closed the pipe: nothing to report to
    except BaseException:
        report_and_exit(conn, "fatal")
    conn.close()
