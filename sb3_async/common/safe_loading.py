"""Loading files from others without running the code they name.

- Replay files load through :class:`ReplayUnpickler`, which builds only what a replay buffer holds (NumPy arrays,
  gymnasium spaces, the replay buffer classes of SB3 and of this package) and refuses any other name in the pickle
  before it is called.
- ``load(path, trusted=False)`` never unpickles an entry of a model's ``data`` (SB3 stores there, as ``:serialized:``
  cloudpickle, whatever JSON cannot hold): :func:`safe_model_source` rebuilds each such entry from plain values (a
  class by its name, within the libraries of this package; a space from the env given or from its plain
  description; SB3's schedules from their parameters) or leaves it out, so that the constructor's default stays.
- Integrity digests: :func:`add_digests` writes the SHA-256 of every part of a model zip into one more entry,
  :func:`check_digests` recomputes them at load and names a part that does not match.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import pickle
import re
import sys
import zipfile
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer

# --- integrity digests -----------------------------------------------------------------------------------------------

#: The zip entry holding the SHA-256 of every other entry (SB3's own readers load ``data`` and ``*.pth`` only).
DIGESTS_ENTRY = "sha256_digests.json"


def add_digests(buffer: io.BytesIO) -> None:
    """Add to the model zip in ``buffer`` an entry with the SHA-256 of each of its entries (data, policy.pth, ...)."""
    buffer.seek(0)
    with zipfile.ZipFile(buffer, "a") as archive:
        digests = {name: hashlib.sha256(archive.read(name)).hexdigest() for name in archive.namelist()}
        archive.writestr(DIGESTS_ENTRY, json.dumps({"sha256": digests}, indent=1, sort_keys=True))


def check_digests(archive: zipfile.ZipFile, path: Any) -> None:
    """Recompute the digest of each part of ``archive`` and raise ``ValueError`` naming a part that differs from the
    digest saved with it, is missing, or was added after saving. A file saved without digests (an earlier version,
    another tool) passes."""
    names = archive.namelist()
    if DIGESTS_ENTRY not in names:
        return
    try:
        saved = json.loads(archive.read(DIGESTS_ENTRY))["sha256"]
        assert isinstance(saved, dict)
    except (ValueError, KeyError, TypeError, AssertionError) as error:
        raise ValueError(f"Invalid model file {path!r}: its {DIGESTS_ENTRY!r} entry is unreadable ({error})") from error
    for name in names:
        if name == DIGESTS_ENTRY:
            continue
        if name not in saved:
            raise ValueError(f"Invalid model file {path!r}: its part {name!r} has no saved digest (added after saving)")
        if hashlib.sha256(archive.read(name)).hexdigest() != saved[name]:
            raise ValueError(
                f"Invalid model file {path!r}: its part {name!r} does not match the SHA-256 digest saved with it "
                "(changed after saving)"
            )
    missing = sorted(set(saved) - set(names))
    if missing:
        raise ValueError(f"Invalid model file {path!r}: its part {missing[0]!r} is missing (removed after saving)")


# --- replay files ----------------------------------------------------------------------------------------------------

#: The names a replay pickle may hold besides the classes of :data:`_REPLAY_CLASS_MODULES`: NumPy's array, dtype and
#: scalar constructors (NumPy 1 and 2 names), its random generators' state, ``torch.device`` and plain containers.
_REPLAY_NAMES = frozenset(
    [
        *(
            (module, name)
            for module in ("numpy.core.multiarray", "numpy._core.multiarray")
            for name in ("_reconstruct", "scalar")
        ),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        *(("numpy.random._pickle", name) for name in ("__bit_generator_ctor", "__generator_ctor", "__randomstate_ctor")),
        ("numpy.random.bit_generator", "SeedSequence"),
        ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
        ("numpy.random._pcg64", "PCG64"),
        ("numpy.random._pcg64", "PCG64DXSM"),
        ("numpy.random._mt19937", "MT19937"),
        ("numpy.random._philox", "Philox"),
        ("numpy.random._sfc64", "SFC64"),
        ("torch", "device"),
        ("collections", "OrderedDict"),
        ("collections", "deque"),
        *(("builtins", name) for name in ("set", "frozenset", "complex", "slice", "range", "bytearray")),
    ]
)


#: Where the classes of a replay buffer may come from: module -> the class they must be (a prefix ending with ".":
#: every module under it).
_REPLAY_CLASS_MODULES: dict[str, type] = {
    "sb3_async.common.buffers.": object,
    "stable_baselines3.common.buffers": BaseBuffer,
    "gymnasium.spaces.": spaces.Space,
}


def _replay_class_module(module: str) -> Any:
    """The base class a replay's class found in ``module`` must have, or None when ``module`` holds none of them."""
    for prefix, base in _REPLAY_CLASS_MODULES.items():
        if module == prefix or (prefix.endswith(".") and module.startswith(prefix) and "__main__" not in module):
            return base
    return None


class ReplayUnpickler(pickle.Unpickler):
    """An unpickler that builds what a replay buffer is made of and refuses every other name a pickle holds (a
    function, a class of another library) before it is called: ``ValueError`` naming it and the file."""

    def __init__(self, file: Any, source: Any) -> None:
        super().__init__(file)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _REPLAY_NAMES:
            return super().find_class(module, name)
        base = _replay_class_module(module)
        if base is not None and "." not in name:  # a module of the buffers or spaces: importing it runs nothing else
            value = super().find_class(module, name)
            if isinstance(value, type) and value.__module__ == module and issubclass(value, base):
                return value
        raise ValueError(
            f"Invalid replay buffer file {str(self.source)!r}: it names {module}.{name}, which is not part of a replay "
            "buffer; refused before calling it (unpickling would run the code it names)"
        )


def load_replay_pickle(file: Any, source: Any) -> Any:
    """The object of the pickle in the open binary ``file`` (named ``source`` in errors), through
    :class:`ReplayUnpickler`."""
    return ReplayUnpickler(file, source).load()


# --- model files without unpickling ----------------------------------------------------------------------------------

#: Where :func:`resolve_class` looks for a class named in a file: this package and the libraries it builds on.
CLASS_ROOTS = ("sb3_async", "stable_baselines3", "sb3_contrib", "torch", "gymnasium")
#: Of those, where a module not imported yet may be imported to find it (the others: only modules already imported).
_IMPORTED_ROOTS = ("sb3_async", "stable_baselines3", "sb3_contrib")
#: The attribute every model saves with the plain description that ``load(..., trusted=False)`` rebuilds from.
PLAIN_KEY = "_plain_description"
#: Entries that are one object in the file whose plain fields are also the model's attributes of earlier versions
#: (the algorithms rebuild the object from those: ``GradientSharing.from_saved_attributes``).
_FLATTENED = {"gradient_sharing": ("optimizer_name", "optimizer_kwargs", "max_grad_norm", "separate_updates")}
#: Entries rebuilt by the model itself from plain values (``lr_schedule`` from ``learning_rate``): left out.
_REBUILT_BY_MODEL = ("lr_schedule",)
_CLASS_REPR = re.compile(r"^<class '(?P<name>[\w.]+)'>$")


def class_name(value: type) -> str:
    return f"{value.__module__}:{value.__qualname__}"


def resolve_class(name: str, base: type | None = None) -> type | None:
    """The class ``name`` names (``"module:qualname"``, or ``"<class 'module.Name'>"`` as SB3's description writes
    it), looked up only in :data:`CLASS_ROOTS` (a module of PyTorch or gymnasium only when already imported; importing
    a module there runs no code of the file); None when it is elsewhere, not found, not a class or not a ``base``."""
    match = _CLASS_REPR.match(name)
    if match is not None:
        module, _, qualname = match["name"].rpartition(".")
    else:
        module, _, qualname = name.partition(":")
    root = module.partition(".")[0]
    if root not in CLASS_ROOTS or not qualname or "__main__" in module.split("."):
        return None
    try:
        value: Any = importlib.import_module(module) if root in _IMPORTED_ROOTS else sys.modules[module]
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, KeyError):
        return None
    if not isinstance(value, type) or (base is not None and not issubclass(value, base)):
        return None
    return value


def describe_space(space: Any) -> dict[str, Any] | None:
    """A plain (JSON) description of ``space`` that :func:`space_from_description` rebuilds exactly; None for a space
    it does not know."""
    if isinstance(space, spaces.Box):
        bounds = {}
        for side in ("low", "high"):
            values = getattr(space, side)
            uniform = values.size > 0 and bool(np.all(values == values.flat[0]))
            bounds[side] = values.flat[0].item() if uniform else values.tolist()
        return {"type": "Box", "shape": list(space.shape), "dtype": str(space.dtype), **bounds}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist(), "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        parts = {key: describe_space(part) for key, part in space.spaces.items()}
        return None if any(part is None for part in parts.values()) else {"type": "Dict", "spaces": parts}
    if isinstance(space, spaces.Tuple):
        items = [describe_space(part) for part in space.spaces]
        return None if any(part is None for part in items) else {"type": "Tuple", "spaces": items}
    return None


def space_from_description(description: Any) -> spaces.Space | None:
    """The space :func:`describe_space` described; None for a description it cannot read."""
    if not isinstance(description, dict):
        return None
    kind = description.get("type")
    try:
        if kind == "Box":
            shape, dtype = tuple(description["shape"]), np.dtype(description["dtype"])
            low = np.broadcast_to(np.asarray(description["low"], dtype=dtype), shape)
            high = np.broadcast_to(np.asarray(description["high"], dtype=dtype), shape)
            return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
        if kind == "Discrete":
            return spaces.Discrete(int(description["n"]), start=int(description["start"]), dtype=description["dtype"])
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete(description["nvec"], dtype=description["dtype"], start=description["start"])
        if kind == "MultiBinary":
            return spaces.MultiBinary(description["n"])
        if kind in ("Dict", "Tuple"):
            parts = description["spaces"]
            named = parts.items() if kind == "Dict" else enumerate(parts)
            rebuilt: dict[Any, spaces.Space] = {}
            for key, part in named:
                space = space_from_description(part)
                if space is None:
                    return None
                rebuilt[key] = space
            return spaces.Dict(rebuilt) if kind == "Dict" else spaces.Tuple(list(rebuilt.values()))
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _space_from_sb3_description(entry: dict[str, Any]) -> spaces.Space | None:
    """A ``Discrete`` or ``Box`` from what SB3 writes beside a pickled space (files saved without our description):
    the attributes' printed values; None when they do not give the space (a printout shortened by ``...``)."""
    kind = str(entry.get(":type:", ""))
    try:
        if kind.endswith("Discrete'>") and "Multi" not in kind:
            return spaces.Discrete(int(entry["n"]), start=int(entry.get("start", 0)))
        if kind.endswith(".Box'>"):
            shape, dtype = tuple(int(size) for size in json.loads(str(entry["_shape"]))), np.dtype(entry["dtype"])
            bounds = []
            for side in ("low", "high"):
                text = str(entry[side])
                if "..." in text:
                    return None
                bounds.append(np.array(text.replace("[", " ").replace("]", " ").split(), dtype=np.float64).reshape(shape))
            return spaces.Box(low=bounds[0].astype(dtype), high=bounds[1].astype(dtype), shape=shape, dtype=dtype)
    except (KeyError, TypeError, ValueError):
        return None
    return None


def describe_for_safe_loading(model: Any, attributes: dict[str, Any]) -> dict[str, Any]:
    """What ``load(..., trusted=False)`` needs of ``model`` in plain values: the names of the classes among its saved
    ``attributes`` (and in its ``policy_kwargs``), and its spaces' descriptions."""
    classes = {key: class_name(value) for key, value in attributes.items() if isinstance(value, type)}
    for key, value in (getattr(model, "policy_kwargs", None) or {}).items():
        if isinstance(value, type):
            classes[f"policy_kwargs.{key}"] = class_name(value)
    described: dict[str, Any] = {"classes": classes}
    tuples = {key: _plain_tuple(value) for key, value in attributes.items() if isinstance(value, tuple)}
    described["tuples"] = {key: value for key, value in tuples.items() if value is not None}
    for key in ("observation_space", "action_space"):
        description = describe_space(getattr(model, key, None))
        if description is not None:
            described[key] = description
    return described


def _plain_tuple(value: tuple) -> list[Any] | None:
    """A tuple of plain values (SB3's ``TrainFreq``: a count and an enum's value) as a JSON list; None otherwise."""
    items = [getattr(item, "value", item) for item in value]
    return items if all(isinstance(item, (int, float, str, bool)) for item in items) else None


def _env_recipe_from_description(entry: dict[str, Any]) -> Any:
    """The env recipe of a model trained on an env id (no factory, pickled env or wrapper, plain keyword
    arguments), rebuilt from that id; None for any other recipe."""
    from sb3_async.common.worker_envs import EnvRecipe

    plain_id = isinstance(entry.get("env_id"), str) and isinstance(entry.get("env_kwargs", {}), dict)
    if not plain_id or entry.get("factory") is not None or entry.get("pickled_env") is not None:
        return None
    if entry.get("vec_wrappers") != [] or entry.get("multi_agent") is not False:
        return None
    try:
        return EnvRecipe(entry["env_id"], entry.get("env_kwargs") or None)
    except Exception:  # an id not registered here: left out, as any entry not rebuilt
        return None


def _schedule_from_description(entry: dict[str, Any]) -> Any:
    """SB3's ``ConstantSchedule`` / ``LinearSchedule`` (in a ``FloatSchedule``) from the parameters SB3 writes beside
    the pickled schedule; None for any other callable (a function cannot be rebuilt without its code)."""
    from stable_baselines3.common.utils import ConstantSchedule, FloatSchedule, LinearSchedule

    kind = str(entry.get(":type:", ""))
    text = str(entry.get("value_schedule", "")) if kind.endswith(".FloatSchedule'>") else None
    number = r"([-+0-9.eE]+|inf|-inf|nan)"
    try:
        if kind.endswith(".LinearSchedule'>"):
            return LinearSchedule(float(entry["start"]), float(entry["end"]), float(entry["end_fraction"]))
        if kind.endswith(".ConstantSchedule'>"):
            return ConstantSchedule(float(entry["val"]))
        if text is not None:
            constant = re.fullmatch(rf"ConstantSchedule\(val={number}\)", text)
            if constant:
                return FloatSchedule(ConstantSchedule(float(constant[1])))
            linear = re.fullmatch(rf"LinearSchedule\(start={number}, end={number}, end_fraction={number}\)", text)
            if linear:
                return FloatSchedule(LinearSchedule(float(linear[1]), float(linear[2]), float(linear[3])))
            if re.fullmatch(number, text):
                return FloatSchedule(float(text))
    except (KeyError, TypeError, ValueError):
        return None
    return None


def _policy_kwargs_from_description(entry: dict[str, Any], classes: dict[str, str]) -> dict[str, Any] | None:
    """``policy_kwargs`` from its first-level items as SB3 writes them, classes resolved by name; None when an item
    is neither plain nor a class of :data:`CLASS_ROOTS` (a function, an object)."""
    rebuilt: dict[str, Any] = {}
    for key, value in entry.items():
        if key.startswith(":"):
            continue
        name = classes.get(f"policy_kwargs.{key}", value if isinstance(value, str) and _CLASS_REPR.match(value) else None)
        if name is not None:
            resolved = resolve_class(name)
            if resolved is None:
                return None
            rebuilt[key] = resolved
        elif isinstance(value, str) and (value.startswith("<") or " object at 0x" in value):
            return None  # the printout of an object SB3 could not write as JSON
        else:
            rebuilt[key] = value
    return rebuilt


def _policy_class(cls: Any, entry: dict[str, Any], classes: dict[str, str]) -> type | None:
    from stable_baselines3.common.policies import BasePolicy

    if "policy_class" in classes:
        return resolve_class(classes["policy_class"], BasePolicy)

    # A file saved without the names: the algorithm's own policy whose module, docstring and own attributes are those
    # SB3 wrote beside the pickled class (its first-level items: the class's own attributes, printed)
    def own_names(names: Any) -> set[str]:
        return {name for name in names if not name.startswith(("__", ":"))}

    candidates = {
        policy
        for policy in getattr(cls, "policy_aliases", {}).values()
        if policy.__module__ == entry.get("__module__")
        and policy.__dict__.get("__doc__") == entry.get("__doc__")
        and own_names(policy.__dict__) == own_names(entry)
    }
    return candidates.pop() if len(candidates) == 1 else None


def safe_model_source(
    cls: Any, archive_bytes: bytes, data: dict[str, Any], env: Any, custom_objects: dict[str, Any] | None, path: Any
) -> tuple[io.BytesIO, dict[str, Any], list[str]]:
    """The model zip to give SB3's ``load()`` instead of ``archive_bytes``, whose ``data`` holds no ``:serialized:``
    entry, with the ``custom_objects`` that replace those it needs as objects, and the names of the entries left
    out (the constructor's defaults stay for them).

    :param data: the file's ``data``, as JSON (nothing unpickled)
    :param env: the env given to ``load()``: its spaces when the file does not describe them
    :raises ValueError: naming the file, when the policy class or a space cannot be rebuilt without unpickling
    """
    custom = dict(custom_objects or {})
    found = data.get(PLAIN_KEY)
    plain: dict[str, Any] = found if isinstance(found, dict) else {}
    classes = plain.get("classes", {}) if isinstance(plain.get("classes"), dict) else {}
    rewritten: dict[str, Any] = {}
    skipped: list[str] = []
    for key, entry in data.items():
        if key in custom or not (isinstance(entry, dict) and ":serialized:" in entry):
            rewritten[key] = entry
            continue
        value: Any = None
        if key == "policy_class":
            value = _policy_class(cls, entry, classes)
            if value is None:
                raise ValueError(
                    f"Invalid model file {path!r} for load(..., trusted=False): its policy class is not one of "
                    f"{', '.join(CLASS_ROOTS)} named in the file; pass custom_objects={{'policy_class': ...}}, or "
                    "trusted=True for a file you trust"
                )
        elif key in ("observation_space", "action_space"):
            value = space_from_description(plain.get(key))
            if value is None and env is not None:
                value = getattr(env, key, None)
            if value is None:
                value = _space_from_sb3_description(entry)
            if value is None:
                raise ValueError(
                    f"Invalid model file {path!r} for load(..., trusted=False): its {key} cannot be rebuilt without "
                    "unpickling; pass the env (load(path, env=...)), or trusted=True for a file you trust"
                )
        elif key in _FLATTENED:
            fields = _FLATTENED[key]
            if all(field in entry for field in fields):
                rewritten.update({field: entry[field] for field in fields})
            else:
                skipped.append(key)
            continue
        elif key in _REBUILT_BY_MODEL:
            continue
        elif key in classes:
            value = resolve_class(classes[key])
        elif isinstance(plain.get("tuples"), dict) and isinstance(plain["tuples"].get(key), list):
            value = tuple(plain["tuples"][key])
        elif str(entry.get(":type:")) == "<class 'sb3_async.common.worker_envs.EnvRecipe'>":
            value = _env_recipe_from_description(entry)
        elif key == "policy_kwargs":
            value = _policy_kwargs_from_description(entry, classes)
            if value is None:
                raise ValueError(
                    f"Invalid model file {path!r} for load(..., trusted=False): its policy_kwargs hold objects "
                    "that cannot be rebuilt without unpickling; pass custom_objects={'policy_kwargs': ...}, or "
                    "trusted=True for a file you trust"
                )
        else:
            value = _schedule_from_description(entry)
        if value is None:
            skipped.append(key)
            continue
        custom[key] = value
        rewritten[key] = None  # SB3 takes the custom object for a key the file has
    source = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive_bytes)) as original, zipfile.ZipFile(source, "w") as copy:
        for info in original.infolist():
            content = json.dumps(rewritten).encode() if info.filename == "data" else original.read(info.filename)
            copy.writestr(info, content)
    source.seek(0)
    return source, custom, skipped
