"""The workers give their heap's free pages back to the system (sb3_async.runtime.heap)."""

from __future__ import annotations

import multiprocessing as mp
import platform
import subprocess
import sys
import time

import pytest

from sb3_async.runtime import base
from sb3_async.runtime.heap import release_free_heap
from tests.helpers import in_process_context

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# A fragmented heap: 1 KB blocks (malloc's, not pymalloc's), one in 64 kept, the rest freed. The freed pages lie
# between kept blocks, so free() cannot give them back; malloc_trim(0) can.
_FRAGMENT_THEN_TRIM = """
import os, sys
from sb3_async.runtime.heap import release_free_heap
from tests.helpers import in_process_context

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

blocks = [bytes(1024) for _ in range(300_000)]
kept = blocks[::64]
del blocks
before = rss_mb()
released = release_free_heap()
after = rss_mb()
print(released, round(before), round(after))
sys.exit(0 if released and before - after > 100 else 1)
"""


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_release_free_heap_returns_the_free_pages_of_a_fragmented_heap() -> None:
    result = subprocess.run([sys.executable, "-c", _FRAGMENT_THEN_TRIM], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.stdout, result.stderr)  # released, and RSS fell by more than 100 MB


def test_release_free_heap_is_a_no_op_without_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    from sb3_async.runtime import heap

    monkeypatch.setattr(heap, "_MALLOC_TRIM", False)  # what macOS, Windows and musl get
    assert release_free_heap() is False


def test_workers_trim_their_heap_once_per_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[float] = []
    monkeypatch.setattr(base, "TRIM_INTERVAL_SECONDS", 0.2)
    monkeypatch.setattr(base, "release_free_heap", lambda: trims.append(time.monotonic()) or True)
    receiver, conn = mp.Pipe(duplex=False)
    ctx = in_process_context(conn, total_timesteps=10)
    assert not ctx.should_stop() and trims == []  # within the first interval
    time.sleep(0.25)
    assert not ctx.should_stop() and len(trims) == 1  # the interval has passed: one trim
    assert not ctx.should_stop() and len(trims) == 1  # and none again before the next interval
    receiver.close()
    conn.close()
