"""Saving and loading models safely.

- Saves that a crash cannot half-write: ``save()`` and ``save_replay_buffer()`` write a temporary file next to the
  target and rename it over the target once it is complete, so a process killed mid-save leaves the previous file.
- What ``load()`` checks before SB3 reads a model file: that it is a complete model zip, saved by this algorithm,
  whose parts match their saved digests and whose saved arguments pass the constructor's checks.
- Replay files read through the restricted unpickler of :mod:`sb3_async.common.safe_loading`.
"""

from __future__ import annotations

import contextlib
import glob
import importlib
import inspect
import io
import json
import os
import pathlib
import pickle
import pickletools
import secrets
import sys
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import open_path, save_to_pkl

from sb3_async.common.safe_loading import (
    PLAIN_KEY,
    add_digests,
    check_digests,
    describe_for_safe_loading,
    load_replay_pickle,
    safe_model_source,
)
from sb3_async.validation import check_backend

#: What a file path may be (SB3 also accepts open binary files, written in place).
PathLike = str | os.PathLike


def _target_path(path: PathLike, suffix: str) -> pathlib.Path:
    """The file SB3 would write for ``path``: ``suffix`` added when the name has none, ``_2`` after a folder's name."""
    target = pathlib.Path(path)
    if target.suffix == "":
        target = pathlib.Path(f"{target}.{suffix}")
    if target.is_dir():
        warnings.warn(f"Path '{target}' is a folder. Will save instead to {target}_2", stacklevel=3)
        target = pathlib.Path(f"{target}_2")
    return target


def _fsync_folder(folder: pathlib.Path) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: PathLike | io.BufferedIOBase, suffix: str) -> Iterator[Any]:
    """An open binary file to write ``path``'s new content to, which replaces ``path`` only once it is complete.

    The content goes to a hidden temporary file in the target's folder, is flushed to disk (``fsync``) and renamed
    over the target (``os.replace``, atomic): a process killed at any moment leaves either the previous file or the
    new one, never a truncated one. What such a process leaves beside it, a hidden ``.<name>.<pid>-<token>.tmp``, the
    next save of that target removes (:func:`remove_stale_temporaries`). An error while writing removes the temporary
    file and leaves the target as it was. An open file given instead of a path is yielded as it is (written in place).

    :param path: the file to write (SB3's convention: ``.suffix`` added when the name has none), or an open file
    :param suffix: the suffix to add to a path without one (``"zip"``, ``"pkl"``)
    """
    if not isinstance(path, (str, os.PathLike)):
        yield path
        return
    target = _target_path(path, suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    temporary = target.parent / f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    # O_EXCL: a fresh file; mode 0o666 so the umask applies as for a file open() creates
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(target.parent)


def remove_stale_temporaries(target: pathlib.Path) -> list[pathlib.Path]:
    """Remove the temporary files that saves of ``target`` killed mid-write left (:func:`atomic_write`): those of a
    process that no longer runs, and those of earlier versions, whose names carry no process id. A save in progress
    in another process keeps its file.

    :return: the files removed
    """
    removed = []
    for candidate in target.parent.glob(f".{glob.escape(target.name)}.*.tmp"):
        writer = candidate.name[len(target.name) + 2 : -len(".tmp")].partition("-")[0]
        if writer.isdigit() and _process_runs(int(writer)):
            continue
        with contextlib.suppress(OSError):
            candidate.unlink()
            removed.append(candidate)
    return removed


def _process_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def check_pickled_class(path: Any, expected: type) -> None:
    """Refuse a pickle file whose object is not an ``expected`` (a subclass counts), before unpickling it.

    The class comes from the file's first global reference, read without running anything; it is resolved only in
    ``sb3_async`` and ``stable_baselines3``, or in a module this process has already imported. This refuses a file
    that holds something else (another program's pickle, code) with a message naming what it holds; what follows
    the first class is for :func:`load_replay`'s restricted unpickler. An open file instead of a path is not checked.

    :raises ValueError: the file holds another object, or no class at all
    """
    if not isinstance(path, (str, os.PathLike)):
        return
    file_path = pathlib.Path(path)
    if not file_path.exists() and file_path.suffix == "":
        file_path = file_path.with_suffix(".pkl")  # as SB3's load_from_pkl
    if not file_path.is_file():
        return  # SB3's loading names the missing file
    reference = None
    try:
        with open(file_path, "rb") as file:
            strings: list[str] = []
            for opcode, argument, _ in pickletools.genops(file):
                if opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"):
                    strings.append(str(argument))
                elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    reference = (strings[-2], strings[-1])
                    break
                elif opcode.name in ("GLOBAL", "INST"):
                    module, _, name = str(argument).partition(" ")
                    reference = (module, name)
                    break
    except ValueError as error:  # not a pickle stream
        raise ValueError(f"Invalid replay buffer file {str(path)!r}: it is truncated or corrupt ({error})") from error
    found = None
    if reference is not None:
        module, name = reference
        if module.partition(".")[0] in ("sb3_async", "stable_baselines3"):
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
        found = getattr(sys.modules.get(module), name, None)
    if not (isinstance(found, type) and issubclass(found, expected)):
        what = "no class" if reference is None else ".".join(reference)
        raise ValueError(
            f"Invalid replay buffer file {str(path)!r}: expected a pickled {expected.__name__}, it holds {what} (it was "
            "not unpickled: unpickling a file runs the code it names)"
        )


@contextlib.contextmanager
def replay_file_errors(path: Any) -> Iterator[None]:
    """Turn the errors of unpickling a truncated or corrupt replay file into a ``ValueError`` naming the file."""
    try:
        yield
    except (pickle.UnpicklingError, EOFError) as error:
        name = getattr(path, "name", path)
        raise ValueError(
            f"Invalid replay buffer file {str(name)!r}: it is truncated or corrupt ({type(error).__name__}: {error})"
        ) from error


def load_checked(
    cls: Any,
    path: Any,
    env: Any = None,
    device: Any = "auto",
    custom_objects: dict[str, Any] | None = None,
    print_system_info: bool = False,
    force_reset: bool = True,
    trusted: bool = True,
    **kwargs: Any,
) -> Any:
    """SB3's ``load()`` (``cls.load``: the algorithms take this function as their ``load`` classmethod), after checking
    that ``path`` is a complete model zip saved by ``cls`` whose parts match the digests saved with them (another
    algorithm's file, e.g. SB3's, a truncated or altered file raises ``ValueError`` naming the file and the part) and
    whose saved arguments pass the constructor's checks (the constructor's error), with the module names of
    :data:`RENAMED_MODULES` importable while it unpickles. The keyword arguments of ``cls``'s own that SB3's ``load()``
    does not know (the worker counts under the constructor's names: ``cls._pop_load_options``, when it has one) are
    applied to the loaded model (its ``_apply_load_options``).

    :param trusted: True (SB3's behaviour): the pickled objects the file holds (the env recipe, schedules, noise) are
        unpickled, which runs the code they name: for your own files. False, for files from others: nothing is
        unpickled (:func:`~sb3_async.common.safe_loading.safe_model_source`); classes are found by name in this package
        and the libraries it builds on, spaces rebuilt from their plain description (or the env given), SB3's
        schedules from their parameters, and what cannot be rebuilt keeps the constructor's default (a warning names
        it; without the env recipe, pass an env to learn)
    """
    if not isinstance(trusted, bool):
        raise TypeError(f"Invalid trusted={trusted!r}: expected True (unpickle the file's objects) or False")
    path = _model_path(path)
    data = _read_data(path)
    if cls.saved_class_marker is not None:
        check_saved_class(path, cls, marker=cls.saved_class_marker, data=data)
    pop_options = getattr(cls, "_pop_load_options", None)
    options = pop_options(kwargs) if pop_options is not None else {}
    if data is not None:
        check_saved_arguments(cls, data, {**kwargs, **options}, path)
    source = path
    if not trusted and data is not None:
        source, custom_objects, skipped = safe_model_source(cls, _read_bytes(path), data, env, custom_objects, path)
        if skipped:
            warnings.warn(
                f"load(..., trusted=False) of {path!r} left out the pickled entries {', '.join(skipped)}: the "
                "constructor's defaults stand for them (load with trusted=True a file you trust to restore them)",
                stacklevel=3,
            )
    with renamed_modules():
        model = BaseAlgorithm.load.__func__(  # type: ignore[attr-defined]
            cls, source, env, device, custom_objects, print_system_info, force_reset, **kwargs
        )
    if options:
        model._apply_load_options(options)
    return model


#: Constructor parameters that the saved arguments are not checked against: what load() passes itself, and
#: ``policy_kwargs`` (completed by the constructor, saved completed).
_UNCHECKED_PARAMETERS = ("self", "policy", "env", "device", "_init_setup_model", "policy_kwargs")


def check_saved_arguments(cls: Any, data: dict[str, Any], given: dict[str, Any], path: Any) -> None:
    """Run ``cls``'s constructor checks on the arguments saved in ``data`` (the plain ones, each under its
    constructor name: ``cls.workers_argument`` for ``n_workers``...) and on those ``given`` to
    ``load()``: a file whose ``n_workers`` was edited to -3 fails here with the constructor's message, not at the
    first ``learn()``. Checks that depend on this machine (``cls._arguments_checked_on_load``) are left to
    ``learn()``.

    :raises TypeError, ValueError: the constructor's, with the file named
    """
    parameters = inspect.signature(cls).parameters
    saved_names = {  # constructor name -> the attribute saved (Ape-X: n_actors -> n_workers)
        getattr(cls, "workers_argument", "n_workers"): "n_workers",
        getattr(cls, "envs_argument", "n_envs_per_worker"): "n_envs_per_worker",
    }
    given_names = {saved_names.get(name, name): value for name, value in given.items()}
    arguments: dict[str, Any] = {}
    for name in parameters:
        if name in _UNCHECKED_PARAMETERS:
            continue
        attribute = saved_names.get(name, name)
        if name in given:
            arguments[name] = given[name]
        elif attribute in given_names:
            arguments[name] = given_names[attribute]
        elif attribute in data and not (isinstance(data[attribute], dict) and ":serialized:" in data[attribute]):
            arguments[name] = data[attribute]
    adjust = getattr(cls, "_arguments_checked_on_load", None)
    if adjust is not None:
        arguments = adjust(arguments)
    policy = next(iter(getattr(cls, "policy_aliases", {})), None)
    try:
        cls(policy=policy, env=None, device="cpu", _init_setup_model=False, **arguments)
    except (TypeError, ValueError) as error:
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"{error} (in the model file {str(path)!r})") from error


def backend_checked_apart(arguments: dict[str, Any], stand_in: str) -> dict[str, Any]:
    """Saved constructor ``arguments`` for :func:`check_saved_arguments` with their ``backend`` and
    ``backend_kwargs`` checked here (:func:`~sb3_async.validation.check_backend`) and the backend replaced by
    ``stand_in``, so that the constructor's checks do not depend on this machine: no import of Ray (a model trained on
    a cluster loads and predicts without it), no bound on the worker count from this machine's CPUs."""
    check_backend(arguments.pop("backend", "mp"), arguments.pop("backend_kwargs", None))
    return {**arguments, "backend": stand_in}


def _model_path(path: Any) -> Any:
    """The file SB3's ``load()`` reads for ``path``: ``.zip`` added when ``path`` does not exist but that file does."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path) and os.path.exists(f"{os.fspath(path)}.zip"):
        return f"{os.fspath(path)}.zip"
    return path


def _read_bytes(path: Any) -> bytes:
    if isinstance(path, (str, os.PathLike)):
        return pathlib.Path(path).read_bytes()
    start = path.tell()
    try:
        return path.read()
    finally:
        path.seek(start)


def load_replay(path: Any, expected: type, verbose: int = 0) -> Any:
    """The replay buffer in the pickle file ``path`` (SB3's ``load_from_pkl``: ``.pkl`` added when the name has
    none, or an open binary file), an ``expected``: its class checked before reading it (:func:`check_pickled_class`),
    then read through :class:`~sb3_async.common.safe_loading.ReplayUnpickler`, which refuses anything but what a
    replay buffer holds (a ``ValueError`` naming it and the file) before calling it.

    :raises ValueError: another object's file, a name a replay does not hold, a truncated or corrupt file
    :raises TypeError: a replay buffer that is not an ``expected``
    """
    check_pickled_class(path, expected)
    name = getattr(path, "name", path)
    with replay_file_errors(path):
        file = open_path(path, "r", verbose=verbose, suffix="pkl")
        try:
            buffer = load_replay_pickle(file, name)
        finally:
            if isinstance(path, (str, os.PathLike)):
                file.close()
    if not isinstance(buffer, expected):
        got = type(buffer).__name__
        raise TypeError(f"Invalid replay buffer in {str(name)!r}: expected a {expected.__name__}, got {got}")
    return buffer


def save_replay_atomically(model: BaseAlgorithm, path: PathLike | io.BufferedIOBase) -> None:
    """``model.save_replay_buffer(path)`` through :func:`atomic_write`: SB3's pickle file, a path replaced only once
    the new file is complete (``.pkl`` added when the name has no suffix)."""
    replay_buffer = getattr(model, "replay_buffer", None)
    if replay_buffer is None:
        raise ValueError(f"{type(model).__name__} has no replay buffer to save yet (it is created by learn())")
    with atomic_write(path, "pkl") as file:
        save_to_pkl(file, replay_buffer, model.verbose)


#: Modules that files saved by earlier versions name (in pickled attributes) -> where that code lives now.
RENAMED_MODULES = {
    "sb3_async.common.env_util": "sb3_async.common.worker_envs",
    "sb3_async.common.games": "sb3_async.games.players",
}


@contextlib.contextmanager
def renamed_modules() -> Iterator[None]:
    """Within the block, the old names of :data:`RENAMED_MODULES` import their new modules, so that unpickling a file
    saved by an earlier version finds its classes; the names are removed again after."""
    added = [old for old in RENAMED_MODULES if old not in sys.modules]
    for old in added:
        sys.modules[old] = importlib.import_module(RENAMED_MODULES[old])
    try:
        yield
    finally:
        for old in added:
            sys.modules.pop(old, None)


#: The attribute every sb3_async model saves with the name of its class (in the zip's ``data``).
SAVED_CLASS_KEY = "saved_class_name"


def _read_data(path: Any) -> dict[str, Any] | None:
    """The ``data`` of the model zip ``path`` (JSON: nothing unpickled), once the zip is complete, every entry's
    checksum right and every part matches its saved digest; None when ``path`` does not exist (SB3 says so)."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
        return None
    start = path.tell() if isinstance(path, io.IOBase) else None
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            for entry in ("data", "policy.pth"):
                if entry not in names:
                    raise ValueError(f"Invalid model file {path!r}: not a complete model zip (no {entry!r} entry: truncated?)")
            corrupt = archive.testzip()  # every entry's checksum: a damaged file fails here, naming the entry
            if corrupt is not None:
                raise ValueError(f"Invalid model file {path!r}: its entry {corrupt!r} is corrupt (checksum mismatch)")
            check_digests(archive, path)
            data = json.loads(archive.read("data"))
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, zipfile.LargeZipFile, zlib.error) as error:
        raise ValueError(f"Invalid model file {path!r}: not a complete model zip ({error})") from error
    finally:
        if start is not None:
            path.seek(start)  # SB3 reads it again
    return data


def check_saved_class(path: Any, cls: type, marker: str, data: dict[str, Any] | None = None) -> None:
    """Raise ``ValueError`` naming ``path`` unless it is a complete model zip saved by ``cls`` (or one of its bases or
    subclasses): the class name every sb3_async model saves, or for files saved before it, ``marker``, an attribute
    that only ``cls``'s family saves. Another algorithm's file (SB3's DQN for ``ApeXDQN``, A2C for ``A3C``) would
    otherwise load and fail later, or train with the wrong hyperparameters. ``data``: the file's, when already read."""
    if data is None:
        data = _read_data(_model_path(path))
    if data is None:
        return  # SB3 says the file does not exist
    saved = data.get(SAVED_CLASS_KEY)
    if isinstance(saved, str):
        family = {klass.__name__ for klass in cls.__mro__} | {klass.__name__ for klass in _subclasses(cls)}
        if saved in family:
            return
        raise ValueError(f"Invalid model file {path!r}: it was saved by {saved}, not {cls.__name__}; load it with {saved}")
    if marker in data:
        return
    policy = data.get("policy_class")
    module = policy.get("__module__", "?") if isinstance(policy, dict) else "?"
    raise ValueError(
        f"Invalid model file {path!r}: not saved by {cls.__name__} (it lacks {marker!r}; its policy class is from "
        f"{module}): load a file of another algorithm (e.g. SB3's) with that algorithm's class"
    )


def mark_saved_class(model: Any) -> None:
    """Record ``model``'s class name among the attributes ``save()`` writes, for :func:`check_saved_class`, and the
    plain description ``load(..., trusted=False)`` rebuilds from."""
    setattr(model, SAVED_CLASS_KEY, type(model).__name__)
    setattr(model, PLAIN_KEY, describe_for_safe_loading(model, vars(model)))


def save_model_atomically(model: Any, sb3_save: Callable[..., None], path: Any, exclude: Any, include: Any) -> None:
    """``sb3_save(file, exclude, include)`` (SB3's ``save()``) through :func:`atomic_write`, the zip completed with
    the SHA-256 digest of each of its parts (:func:`~sb3_async.common.safe_loading.add_digests`)."""
    mark_saved_class(model)
    with atomic_write(path, "zip") as file:
        buffer = io.BytesIO()
        sb3_save(buffer, exclude, include)
        add_digests(buffer)
        file.write(buffer.getbuffer())


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found
