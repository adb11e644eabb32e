"""The package's floor plan: its folders in layers that import only downward, and no import cycle between its modules
(imports inside functions counted too)."""

import ast
from pathlib import Path

import sb3_async

PACKAGE = Path(sb3_async.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*anchor, source] if source else anchor)
                # `from a import b`: the submodule a.b if there is one, else the package a
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names]
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each module that is on one (depth-first search, white/grey/black)."""
    state: dict[str, int] = {}
    path: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_its_way_back_to_itself():
    graph = _import_graph()
    assert "sb3_async.env_pool.pool" in graph and "sb3_async.env_pool.groups" in graph["sb3_async.env_pool.pool"]
    assert _cycles(graph) == []


#: The layers, bottom first (docs/design.md, "Layers"): a module imports only from its own folder and from folders of
#: lower layers. A name is a top-level module or folder of the package; under ``common/`` each subfolder is its own.
LAYERS: list[set[str]] = [
    {"validation", "lazy"},  # argument checks, lazy re-exports
    {"runtime"},  # processes and Ray actors: start, supervise, stop
    {"env_pool"},  # AsyncEnvPool and its transport
    {"common/buffers"},  # replay buffers (usable with stock SB3)
    {"common"},  # the algorithm framework
    {"games"},  # players at turn-based games' other seats, and games as an evaluation
    {"a3c", "async_q", "apex", "ae_ddpg"},  # the algorithms
    {"zoo"},  # the RL Zoo's glue
    {"benchmark", "train", "enjoy", "record_video"},  # what a user runs
]


def _folder_of(module: str) -> str | None:
    parts = module.split(".")[1:]
    if not parts:
        return None  # the package's __init__: it only re-exports, lazily
    if parts[0] == "common" and len(parts) > 2 and (PACKAGE / "common" / parts[1]).is_dir():
        return f"common/{parts[1]}"
    return parts[0]


def _layer_of(folder: str) -> int:
    for index, layer in enumerate(LAYERS):
        if folder in layer:
            return index
    raise AssertionError(f"{folder} is in no layer of LAYERS: add it where it belongs")


def test_folders_import_only_downward():
    upward = []
    for module, targets in _import_graph().items():
        source = _folder_of(module)
        if source is None:
            continue
        for target in targets:
            folder = _folder_of(target)
            if folder is None or folder == source:
                continue
            if _layer_of(folder) >= _layer_of(source):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_layer_check_sees_an_upward_import():
    assert _layer_of("env_pool") < _layer_of("common") < _layer_of("a3c")
    assert _folder_of("sb3_async.common.buffers.sum_tree") == "common/buffers"
    assert _folder_of("sb3_async.runtime.mp") == "runtime"


def _design_page_files() -> str:
    page = (PACKAGE.parent / "docs" / "design.md").read_text()
    return page[page.index("### Files") : page.index("## One runtime")]


def test_the_design_page_maps_every_module():
    listed = _design_page_files()
    modules = [path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py" or path.parent == PACKAGE]
    assert [str(path.relative_to(PACKAGE)) for path in modules if path.name not in listed] == []


#: A sanity bound on a module's length, near SB3's largest file (``base_class.py``, 877 lines): a module holds one job,
#: however long; no cap splits a class across files.
MAX_MODULE_LINES = 900


def test_no_module_over_the_sanity_bound():
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in PACKAGE.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def _class_bases() -> dict[str, set[str]]:
    """Each class of the package -> the names of its bases (by class name, as the project defines them once)."""
    bases: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                names = set()
                for base in node.bases:
                    base = base.value if isinstance(base, ast.Subscript) else base
                    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
                    if name:
                        names.add(name)
                bases.setdefault(node.name, set()).update(names)
    return bases


def _project_ancestors(name: str, bases: dict[str, set[str]]) -> set[str]:
    found: set[str] = set()
    stack = [name]
    while stack:
        for base in bases.get(stack.pop(), ()):
            if base in bases and base not in found:
                found.add(base)
                stack.append(base)
    return found


def test_no_class_has_more_than_two_project_ancestors():
    """A reader opens at most two of the package's own classes to understand one (SB3's bases not counted): the
    package composes objects rather than stacking mixins."""
    bases = _class_bases()
    deep = {name: sorted(found) for name in bases if len(found := _project_ancestors(name, bases)) > 2}
    assert deep == {}


def test_the_ancestor_count_sees_a_chain():
    chain = {"A": set(), "B": {"A"}, "C": {"B", "Mixin"}, "Mixin": {"BaseAlgorithm"}}
    assert _project_ancestors("C", chain) == {"A", "B", "Mixin"}


#: Module names that stand in several folders because they play the same role in each (docs/design.md, "Files").
PARALLEL_ROLES = {"__init__.py", "base.py", "policies.py"}


def test_module_names_are_unique_but_parallel_roles():
    """One name, one thing: two modules share a file name only where they play the same role in parallel folders
    (a folder's base classes, an algorithm's policies)."""
    names: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    shared = {name: places for name, places in names.items() if len(places) > 1 and name not in PARALLEL_ROLES}
    assert shared == {}
    page = _design_page_files()
    assert all(name in page for name in PARALLEL_ROLES - {"__init__.py"})


#: Calls that start a process that may outlive the call (a blocking ``subprocess.run`` with a timeout may stay).
_STARTERS = {
    "Popen", "Process", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnv", "spawnve", "spawnl", "get_context",
    "remote", "ensure_running", "init",
}  # fmt: skip


def test_only_the_runtime_starts_processes():
    """Every process, forkserver, command, Ray cluster and Ray actor starts in runtime/processes.py (its Launcher),
    next to the parent-death watch, the error reports and the stopping that supervise them (``.remote(...)`` calls of
    an actor's methods are not starts)."""
    starters = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "runtime" / "processes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)) or node.func.attr not in _STARTERS:
                continue
            if node.func.attr in ("remote", "init") and not (
                isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"
            ):
                continue  # handle.method.remote(...): a call on an actor that runs, not a start; x.init(): not Ray's
            if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "psutil"):  # psutil only looks
                starters.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert starters == []
