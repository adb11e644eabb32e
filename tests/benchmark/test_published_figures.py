"""Every figure of the README and the docs is generated from a results folder: each ``<!-- generated: ... -->`` block
must equal what its command prints now (``python -m sb3_async.benchmark --sync-docs`` rewrites them). Fast: it
reads ``results.json`` files, trains nothing."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sb3_async.benchmark import published
from sb3_async.benchmark.__main__ import build_parser

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = [
    block for page in published.published_pages(ROOT) for block in published.find_blocks(page, page.read_text().split("\n"))
]


def test_the_pages_publish_generated_tables() -> None:
    pages = {block.path.relative_to(ROOT).as_posix() for block in BLOCKS}
    assert {"README.md", "docs/benchmarks.md"} <= pages, pages


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"{block.path.relative_to(ROOT)}:{block.line}")
def test_generated_block_equals_its_results_folder(block: published.Block) -> None:
    problems = [
        problem
        for problem in published.check_page(block.path, block.path.read_text(), ROOT)
        if f"(marker at line {block.line})" in problem
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: f"{block.path.relative_to(ROOT)}:{block.line}")
def test_block_command_is_a_cli_command_on_a_curated_folder(block: published.Block) -> None:
    args = build_parser().parse_args(shlex.split(block.command))  # the command a reader can paste
    assert args.markdown and args.report
    for folder in args.report:
        results = ROOT / folder if folder.suffix == ".json" else ROOT / folder / "results.json"  # or a script's file
        assert results.parent.parent == ROOT / "benchmarks" / "results", f"{block.path}:{block.line}: {folder} is not curated"
        assert results.is_file(), f"{block.path}:{block.line}: no {results.name} in {results.parent}"


def test_a_hand_edited_figure_fails_the_check() -> None:
    page = ROOT / "docs" / "benchmarks.md"
    text = page.read_text()
    assert published.check_page(page, text, ROOT) == []
    block = next(block for block in BLOCKS if block.path == page)
    lines = text.split("\n")
    index = next(i for i in range(block.begin + 3, block.end) if re.search(r"\d", lines[i]))  # a row, not the header
    lines[index] = re.sub(r"\d", lambda digit: str((int(digit.group()) + 1) % 10), lines[index], count=1)
    (problem,) = published.check_page(page, "\n".join(lines), ROOT)
    assert problem.startswith(f"{page}:{index + 1}: ") and "differs from its results folder" in problem
