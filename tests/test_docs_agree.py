"""The README and the docs site's home page (``docs/index.md``) give a new user the same start: the same install
commands and extras, the same Python quick start and the same RL Zoo commands. Both are read first, by different
people, and a difference between them has shipped before (a shorter ``learn()`` that did not reach the maximum
score, a zoo line without ``-n`` that trained for the config's full budget).
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
