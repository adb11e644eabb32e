"""What ``load()`` checks before SB3 reads a model file: that it is a complete model zip, saved by this algorithm."""

from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Any

#: The attribute every sb3_async model saves with the name of its class (in the zip's ``data``).
SAVED_CLASS_KEY = "saved_class_name"


def _read_data(path: Any) -> dict[str, Any]:
    start = path.tell() if isinstance(path, io.IOBase) else None
    try:
        with zipfile.ZipFile(path) as archive:
            if "data" not in archive.namelist():
                raise ValueError(f"Invalid model file {path!r}: not a complete model zip (no 'data' entry: truncated?)")
            data = json.loads(archive.read("data"))
    except (zipfile.BadZipFile, EOFError, json.JSONDecodeError, zipfile.LargeZipFile) as error:
        raise ValueError(f"Invalid model file {path!r}: not a complete model zip ({error})") from error
    finally:
        if start is not None:
            path.seek(start)  # SB3 reads it again
    return data


def check_saved_class(path: Any, cls: type, marker: str) -> None:
    """Raise ``ValueError`` naming ``path`` unless it is a complete model zip saved by ``cls`` (or one of its bases or
    subclasses): the class name every sb3_async model saves, or for files saved before it, ``marker``, an attribute
    that only ``cls``'s family saves. Another algorithm's file (SB3's DQN for ``ApeXDQN``, A2C for ``A3C``) would
    otherwise load and fail later, or train with the wrong hyperparameters."""
    if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
        if not os.path.exists(f"{os.fspath(path)}.zip"):
            return  # SB3 says the file does not exist
        path = f"{os.fspath(path)}.zip"  # SB3 adds the suffix too
    data = _read_data(path)
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
    """Record ``model``'s class name among the attributes ``save()`` writes, for :func:`check_saved_class`."""
    setattr(model, SAVED_CLASS_KEY, type(model).__name__)


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found
