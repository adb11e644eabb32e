"""The tables of the README and the docs, generated from the results folders and kept equal to them.

A published table sits between two markers; the opening one names the command that renders it::

    <!-- generated: --report benchmarks/results/cartpole --markdown --table ratios -->

    | ... |

    <!-- end generated -->

``python -m sb3_async.benchmark --sync-docs`` rewrites every such block from its folder (:func:`sync_docs`);
``tests/benchmark/test_published_figures.py`` fails when one differs (:func:`check_docs`), so a figure is never typed by hand.
Paths in the commands are relative to the repository's root, where the command is run.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sb3_async.benchmark.tables import KINDS, render_folders

BEGIN = re.compile(r"^<!-- generated: (?P<command>.+?) -->\s*$")
END = "<!-- end generated -->"


@dataclass
class Block:
    """One generated block of a page."""

    path: Path
    begin: int  # index of the opening marker's line
    end: int  # index of the closing marker's line
    command: str

    @property
    def line(self) -> int:
        """The opening marker's line number (1-based), for messages."""
        return self.begin + 1


def published_pages(root: Path) -> list[Path]:
    """The pages that may hold generated blocks: the README and every page of the docs."""
    pages = [root / "README.md"] if (root / "README.md").is_file() else []
    return pages + sorted((root / "docs").rglob("*.md"))


def find_blocks(path: Path, lines: list[str]) -> Iterator[Block]:
    """The blocks of a page.

    :raises ValueError: a marker without its end, or an end without its marker
    """
    begin: int | None = None
    command = ""
    for index, line in enumerate(lines):
        match = BEGIN.match(line)
        if match:
            if begin is not None:
                raise ValueError(f"{path}:{begin + 1}: generated block not closed by {END!r} before line {index + 1}")
            begin, command = index, match.group("command")
        elif line.strip() == END:
            if begin is None:
                raise ValueError(f"{path}:{index + 1}: {END!r} without its '<!-- generated: ... -->'")
            yield Block(path, begin, index, command)
            begin = None
    if begin is not None:
        raise ValueError(f"{path}:{begin + 1}: generated block not closed by {END!r}")


def _command_parser() -> argparse.ArgumentParser:
    # the subset of ``python -m sb3_async.benchmark`` a block may name: the command a reader can run
    parser = argparse.ArgumentParser(prog="<!-- generated: -->", add_help=False, exit_on_error=False)
    parser.add_argument("--report", nargs="+", required=True)
    parser.add_argument("--markdown", action="store_true", required=True)
    parser.add_argument("--table", choices=KINDS)
    parser.add_argument("--algos")
    return parser


def render_command(command: str, root: Path) -> str:
    """The table a block's command prints, its folders read from ``root``.

    :raises ValueError: a command that is not ``--report DIR... --markdown [--table KIND]``
    """
    try:
        args = _command_parser().parse_args(shlex.split(command))
    except (argparse.ArgumentError, SystemExit) as error:
        raise ValueError(
            f"Invalid generated command {command!r}: expected --report DIR... --markdown [--table KIND]"
        ) from error
    algos = [name.strip() for name in args.algos.split(",") if name.strip()] if args.algos else None
    return render_folders([root / folder for folder in args.report], args.table, algos)


def block_text(rendered: str) -> list[str]:
    """The lines between the markers: the table between blank lines (Markdown ends an HTML comment's block at a blank
    line; without one the table would be read as part of the comment)."""
    return ["", *rendered.rstrip("\n").split("\n"), ""]


def check_page(path: Path, text: str, root: Path) -> list[str]:
    """What differs between the page's blocks and their folders: one message per block, naming file and line."""
    lines = text.split("\n")
    problems = []
    for block in find_blocks(path, lines):
        expected = block_text(render_command(block.command, root))
        found = lines[block.begin + 1 : block.end]
        if found == expected:
            continue
        offset = next((i for i, (a, b) in enumerate(zip(found, expected)) if a != b), min(len(found), len(expected)))
        shown_found = found[offset] if offset < len(found) else "(end of block)"
        shown_expected = expected[offset] if offset < len(expected) else "(end of block)"
        problems.append(
            f"{path}:{block.begin + 2 + offset}: the table of `{block.command}` (marker at line {block.line}) differs from "
            f"its results folder:\n  found:    {shown_found}\n  expected: {shown_expected}\n"
            "(figures are generated: run `python -m sb3_async.benchmark --sync-docs`, never edit them by hand)"
        )
    return problems


def check_docs(root: Path) -> list[str]:
    """:func:`check_page` over every published page."""
    return [problem for path in published_pages(root) for problem in check_page(path, path.read_text(), root)]


def sync_page(path: Path, text: str, root: Path) -> str:
    """The page with every block re-rendered from its folder."""
    lines = text.split("\n")
    for block in reversed(list(find_blocks(path, lines))):
        lines[block.begin + 1 : block.end] = block_text(render_command(block.command, root))
    return "\n".join(lines)


def sync_docs(root: Path) -> list[Path]:
    """Rewrite the generated blocks of every published page; return the pages that changed."""
    changed = []
    for path in published_pages(root):
        text = path.read_text()
        synced = sync_page(path, text, root)
        if synced != text:
            path.write_text(synced)
            changed.append(path)
    return changed
