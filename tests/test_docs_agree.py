"""The pages agree with each other and with the package.

The README and the docs site's home page (``docs/index.md``) give a new user the same start: the same install
commands and extras, the same Python quick start and the same RL Zoo commands. Both are read first, by different
people, and a difference between them has shipped before (a shorter ``learn()`` that did not reach the maximum
score, a zoo line without ``-n`` that trained for the config's full budget).

Facts that several pages state are checked against their source: EnvPool's Python range against the ``envpool``
extra's marker in ``pyproject.toml``. The README's links into ``docs/`` (which the MkDocs build does not check, the
README being outside ``docs_dir``) name pages and headings that exist.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_docs import python_blocks

REPO = Path(__file__).resolve().parent.parent
PAGES = {"README.md": REPO / "README.md", "docs/index.md": REPO / "docs" / "index.md"}

#: A fenced block of any language: its info string and its body.
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: A ``pip install`` command in a code span or on a line of a fenced block.
_PIP = re.compile(r"pip install [^`\n#]*")
#: A command of the RL Zoo integration, up to a comment or the end of the code span or line.
_ZOO = re.compile(r"python -m sb3_async\.(?:train|enjoy|record_video)\b[^`\n#]*")


def section(text: str, title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## `` heading (empty when there is none)."""
    match = re.search(rf"^## {re.escape(title)}[ \t]*$", text, re.MULTILINE)
    if match is None:
        return ""
    following = re.search(r"^## ", text[match.end() :], re.MULTILINE)
    return text[match.end() : match.end() + following.start()] if following else text[match.end() :]


def _normalized(commands: list[str]) -> list[str]:
    return [" ".join(command.split()) for command in commands]


def install_commands(text: str) -> list[str]:
    """The shell lines of the Install section's fenced blocks, then every other ``pip install`` command it names
    (the alternative without PyTorch's index, the extras), in order of appearance."""
    install = section(text, "Install")
    fenced = [line for block in _FENCE.finditer(install) for line in block["body"].splitlines() if line.strip()]
    return _normalized(fenced + _PIP.findall(_FENCE.sub("", install)))


def extras_table(text: str) -> list[str]:
    """The rows of the Install section's extras table."""
    return [line.strip() for line in section(text, "Install").splitlines() if line.startswith("| `[")]


def quick_start_code(text: str) -> list[str]:
    """The Python blocks of the Quick start section, as written."""
    return [block.code for block in python_blocks(section(text, "Quick start"))]


def zoo_commands(text: str) -> list[str]:
    """The RL Zoo commands of the Quick start section, without their trailing comments."""
    return _normalized(_ZOO.findall(section(text, "Quick start")))


Extractor = Callable[[str], list[str]]
EXTRACTORS: list[Extractor] = [install_commands, extras_table, quick_start_code, zoo_commands]


@pytest.mark.parametrize("extract", EXTRACTORS, ids=[extract.__name__ for extract in EXTRACTORS])
def test_readme_and_docs_home_agree(extract: Extractor) -> None:
    readme, index = (extract(path.read_text()) for path in PAGES.values())
    assert readme, f"README.md: {extract.__name__} found nothing (a section renamed?)"
    assert readme == index, f"README.md and docs/index.md differ in {extract.__name__}"


def test_install_names_both_ways_to_get_torch() -> None:
    commands = install_commands(PAGES["docs/index.md"].read_text())
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in commands
    assert "pip install torch==2.13.0" in commands


def test_quick_start_trains_long_enough_and_zoo_line_bounds_the_steps() -> None:
    """The quick start's ``learn()`` reaches the maximum score (20k steps reached about 317 of 500), and the zoo's
    train command gives ``-n`` (without it the run trains the config's full 500k steps)."""
    code = "".join(quick_start_code(PAGES["README.md"].read_text()))
    steps = re.search(r"\.learn\((?P<steps>[\d_]+)", code)
    assert steps is not None and int(steps["steps"].replace("_", "")) >= 200_000
    train = [command for command in zoo_commands(PAGES["README.md"].read_text()) if "sb3_async.train" in command]
    assert train and all(re.search(r"\s-n\s+\d", command) for command in train)


def test_extractors_see_a_difference() -> None:
    """The comparison can fail: each extractor tells apart a page and a copy with one change."""
    text = PAGES["README.md"].read_text()
    changes: dict[Extractor, tuple[str, str]] = {
        install_commands: ("plain\n`pip install torch==2.13.0`", "plain\nPyTorch"),
        extras_table: ("| `[pettingzoo]`", "| `[pz]`"),
        quick_start_code: ("model.learn(200_000", "model.learn(20_000"),
        zoo_commands: ("-n 200000 ", ""),
    }
    for extract, (old, new) in changes.items():
        assert old in text, f"{extract.__name__}: the README no longer contains {old!r}; update this test"
        assert extract(text) != extract(text.replace(old, new, 1)), extract.__name__


def test_extras_table_names_every_extra() -> None:
    """Every extra of ``pyproject.toml`` has a row (a missing ``[pettingzoo]`` left the PettingZoo page's first block
    failing with ``No module named 'mpe2'``)."""
    tomllib = pytest.importorskip("tomllib")
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    listed = {name for row in extras_table(PAGES["README.md"].read_text()) for name in re.findall(r"`\[([\w-]+)\]`", row)}
    assert extras <= listed, f"extras missing from README.md's table: {sorted(extras - listed)}"


# --- EnvPool's Python range: every page that states it gives the envpool extra's marker ----------------------------

#: The pages that state EnvPool's Python range.
ENVPOOL_PAGES = ["README.md", "docs/index.md", "CONTRIBUTING.md", "docs/guide/env_pool.md"]
#: A range of Python versions: "3.11–3.14", "3.11-3.14", "3.11 to 3.14".
_PYTHON_RANGE = re.compile(r"\b(?P<low>3\.\d+)\s*(?:–|-|to)\s*(?P<high>3\.\d+)\b")
#: A one-sided bound on the Python version ("≤ 3.11", ">= 3.11").
_PYTHON_BOUND = re.compile(r"(?:≤|≥|<=|>=|<|>)\s*3\.\d+\b")


def envpool_marker_range(pyproject: str) -> tuple[str, str]:
    """The first and last Python versions the ``envpool`` extra installs EnvPool on, from its environment marker
    (``python_version >= '3.11' and python_version < '3.15'`` gives 3.11 and 3.14)."""
    tomllib = pytest.importorskip("tomllib")
    (requirement,) = tomllib.loads(pyproject)["project"]["optional-dependencies"]["envpool"]
    low = re.search(r"python_version\s*>=\s*['\"]3\.(\d+)['\"]", requirement)
    high = re.search(r"python_version\s*<\s*['\"]3\.(\d+)['\"]", requirement)
    assert low and high, f"the envpool extra's marker is not a range of python_version: {requirement!r}"
    return f"3.{low[1]}", f"3.{int(high[1]) - 1}"


def envpool_statements(text: str) -> list[str]:
    """The units of a page that speak of EnvPool (not ``AsyncEnvPool``): each table row alone, else each paragraph."""
    units: list[str] = []
    for paragraph in re.split(r"\n[ \t]*\n", text):
        rows = [line for line in paragraph.splitlines() if line.lstrip().startswith("|")]
        units.extend(rows if rows else [" ".join(paragraph.split())])
    return [unit for unit in units if re.search(r"\bEnvPool\b", unit)]


def envpool_ranges(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The Python ranges and the one-sided Python bounds that a page's EnvPool statements give."""
    statements = envpool_statements(text)
    ranges = [(match["low"], match["high"]) for unit in statements for match in _PYTHON_RANGE.finditer(unit)]
    bounds = [match[0] for unit in statements for match in _PYTHON_BOUND.finditer(unit)]
    return ranges, bounds


@pytest.mark.parametrize("page", ENVPOOL_PAGES)
def test_envpool_python_range_is_the_extras_marker(page: str) -> None:
    expected = envpool_marker_range((REPO / "pyproject.toml").read_text())
    ranges, bounds = envpool_ranges((REPO / page).read_text())
    assert ranges, f"{page}: no Python range stated for EnvPool (reworded? update ENVPOOL_PAGES)"
    assert set(ranges) == {expected}, f"{page}: EnvPool's Python range {ranges} is not the marker's {expected}"
    assert not bounds, f"{page}: a one-sided Python bound for EnvPool {bounds}; the marker's range is {expected}"


def test_envpool_check_sees_a_difference() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert envpool_marker_range(pyproject.replace("python_version < '3.15'", "python_version < '3.13'")) == (
        "3.11",
        "3.12",
    )
    text = (REPO / "CONTRIBUTING.md").read_text()
    low, high = envpool_marker_range(pyproject)
    stated = f"{low}–{high}"
    assert stated in text, f"CONTRIBUTING.md no longer states {stated!r}; update this test"
    assert envpool_ranges(text.replace(stated, f"{low}–3.12", 1))[0] != envpool_ranges(text)[0]
    assert envpool_ranges(text.replace(f"Python {stated}", "Python ≤ 3.11", 1))[1] == ["≤ 3.11"]
    assert envpool_statements("| `[ray]` | Ray |\n| `[envpool]` | EnvPool (Python 3.11–3.14) |") == [
        "| `[envpool]` | EnvPool (Python 3.11–3.14) |"
    ]
    assert envpool_statements("AsyncEnvPool on Python 3.10 to 3.14.") == []


# --- the README's links into the repository ------------------------------------------------------------------------

#: A Markdown link to a relative target: ``[text](path#anchor)`` (no scheme, not an image).
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s:]+)\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<title>.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def anchors(markdown_text: str) -> set[str]:
    """The anchors of a page's headings, as the MkDocs ``toc`` extension makes them (fenced blocks left out)."""
    toc = pytest.importorskip("markdown.extensions.toc")
    text = _FENCE.sub("", markdown_text)
    return {toc.slugify(re.sub(r"[`*]", "", heading["title"]), "-") for heading in _HEADING.finditer(text)}


def broken_links(page: Path) -> list[str]:
    """The relative links of a page whose file, or heading, does not exist."""
    broken = []
    for link in _LINK.finditer(_FENCE.sub("", page.read_text())):
        path, _, anchor = link["target"].partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link['target']} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            broken.append(f"{link['target']} (no such heading in {path or page.name})")
    return broken


def test_readme_links_resolve() -> None:
    """The README is outside MkDocs' ``docs_dir``, so ``mkdocs build --strict`` does not check its links."""
    assert not broken_links(PAGES["README.md"]), broken_links(PAGES["README.md"])


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("# A page\n\n## The `async/` log keys\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](page.md#the-async-log-keys) [here](#a-readme) [web](https://example.org/x.md#y)\n"
        "[gone](page.md#monitoring-an-async-run) [missing](other.md)\n\n# A README\n"
    )
    assert broken_links(readme) == [
        "page.md#monitoring-an-async-run (no such heading in page.md)",
        "other.md (no such file)",
    ]
