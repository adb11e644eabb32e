"""Every Python block of README.md and docs/ runs as written: as a script, in a fresh process, in an empty folder.

A block preceded by the line ``<!-- no-run -->`` (or ``<!-- no-run: why -->``) is skipped: for blocks that need Atari
ROMs, hours of training or a real cluster. Blocks that start Ray carry the ``ray`` marker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parent.parent
NO_RUN = "<!-- no-run"
#: An opening fence of a Python block (possibly indented, inside a list item) and the closing fence.
_OPEN = re.compile(r"^(?P<indent>[ \t]*)```(?:python|py)[ \t]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
#: What a block that starts or joins Ray contains.
_RAY = re.compile(r"""backend\s*=\s*["']ray["']|\bray\.init\(|import ray\b""")


class Block(NamedTuple):
    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    code: str
    run: bool


def python_blocks(text: str, path: str = "<text>") -> list[Block]:
    """The Python blocks of a Markdown text, each with whether it runs (no ``<!-- no-run -->`` line before it)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if opening is None:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not _CLOSE.match(lines[i]):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: a ```python block is never closed")
        i += 1
        previous = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
        code = textwrap.dedent("\n".join(body)) + "\n"
        blocks.append(Block(path, start + 1, code, run=not previous.startswith(NO_RUN)))
    return blocks


def documented_blocks() -> list[Block]:
    files = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [block for file in files for block in python_blocks(file.read_text(), str(file.relative_to(REPO)))]


BLOCKS = documented_blocks()


def _param(block: Block) -> object:
    marks = []
    if not block.run:
        marks.append(pytest.mark.skip(reason="marked <!-- no-run --> in the page"))
    if _RAY.search(block.code):
        marks.append(pytest.mark.ray)
    return pytest.param(block, id=f"{block.path}:{block.line}", marks=marks)


@pytest.mark.parametrize("block", [_param(block) for block in BLOCKS])
def test_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    if _RAY.search(block.code):
        pytest.importorskip("ray")
    script = tmp_path / "example.py"
    script.write_text(block.code)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "PYTHONWARNINGS": "ignore",
        "MPLBACKEND": "Agg",
        # Stock SB3 at torch's default threads slows 20-30x when another process uses the cores (a test run beside
        # this one): one thread keeps the blocks' time a property of the block, not of the machine's load
        "OMP_NUM_THREADS": "1",
        # a block's own `ray.init()` starts a Ray of its own, never joins one another run left on this machine
        "RAY_ADDRESS": "local",
    }
    timeout = 300 if _RAY.search(block.code) else 120
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"{block.path}:{block.line} failed (exit code {result.returncode}):\n{block.code}\n"
        f"--- stdout ---\n{result.stdout[-3000:]}\n--- stderr ---\n{result.stderr[-5000:]}"
    )


def test_the_pages_have_runnable_blocks() -> None:
    """The collection cannot pass vacuously: the README's quick start is found and runs, and no-run stays rare."""
    readme = [block for block in BLOCKS if block.path == "README.md"]
    assert readme and readme[0].run and "A3C.load(" in readme[0].code
    skipped = [f"{block.path}:{block.line}" for block in BLOCKS if not block.run]
    assert len(skipped) <= max(3, len(BLOCKS) // 5), f"too many blocks marked no-run: {skipped}"


def test_block_extraction() -> None:
    text = textwrap.dedent(
        """\
        Intro.

        ```python
        print("runs")
        ```

        <!-- no-run: needs Atari ROMs -->
        ```python
        import ale_py
        ```

        - A list item:

          ```python
          if True:
              print("indented")
          ```

        ```bash
        echo "not Python"
        ```
        """
    )
    blocks = python_blocks(text)
    assert [(block.line, block.run) for block in blocks] == [(3, True), (8, False), (14, True)]
    assert blocks[2].code == 'if True:\n    print("indented")\n'
    with pytest.raises(ValueError, match="never closed"):
        python_blocks("```python\nprint(1)\n")


def test_a_failing_block_fails(tmp_path: Path) -> None:
    """The runner reports a block that raises: the test above can fail."""
    (block,) = python_blocks("```python\nraise SystemExit(3)\n```\n")
    with pytest.raises(AssertionError, match="exit code 3"):
        test_block_runs_as_written(block, tmp_path)
