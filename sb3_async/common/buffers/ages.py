"""How old the transitions a replay samples are: the ``async/sample_age_*`` log keys.

A transition's *age*, when it is sampled, is the number of transitions stored in the replay after it (0: the newest).
A ring replay of ``buffer_size`` rows of ``n_envs`` transitions gives it from the row index alone
(:func:`ring_ages`); a copy elsewhere (HMemory) keeps the count of rows stored before its original
(:meth:`SampleAges.stamp`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SampleAges", "ring_ages"]


def ring_ages(rows: np.ndarray, pos: int, buffer_size: int) -> np.ndarray:
    """Rows stored after each of ``rows`` in a ring whose next write goes to row ``pos``."""
    return (pos - 1 - np.asarray(rows, dtype=np.int64)) % buffer_size


class SampleAges:
    """The ages of the transitions sampled since the last :meth:`take`, in transitions (rows times ``n_envs``).

    :param n_envs: transitions per row of the replay
    """

    def __init__(self, n_envs: int = 1):
        self.n_envs = n_envs
        self.rows_stored = 0  # rows ever written: the clock of stamps
        self._count, self._total, self._largest = 0, 0, 0

    def stored(self, rows: int) -> None:
        """Count ``rows`` new rows written."""
        self.rows_stored += rows

    def stamp(self, ages: np.ndarray) -> np.ndarray:
        """Stamps of rows whose ages (in rows) are ``ages`` now, for a copy of them kept elsewhere."""
        return self.rows_stored - 1 - np.asarray(ages, dtype=np.int64)

    def since(self, stamps: np.ndarray) -> np.ndarray:
        """Ages in rows, now, of copies stamped with ``stamps``."""
        return self.rows_stored - 1 - np.asarray(stamps, dtype=np.int64)

    def add(self, row_ages: np.ndarray) -> None:
        """Count a batch whose transitions' ages in rows are ``row_ages``."""
        if len(row_ages):
            self._count += len(row_ages)
            self._total += int(row_ages.sum()) * self.n_envs
            self._largest = max(self._largest, int(row_ages.max()) * self.n_envs)

    def take(self) -> tuple[float, int] | None:
        """Mean and max age of the transitions sampled since the last call (None if none was), and start again."""
        if not self._count:
            return None
        result = (self._total / self._count, self._largest)
        self._count, self._total, self._largest = 0, 0, 0
        return result


def sample_ages_of(buffer: object) -> SampleAges:
    """The replay's :class:`SampleAges` (created for a replay pickled before it had one)."""
    ages = getattr(buffer, "sample_ages", None)
    if ages is None:
        ages = SampleAges(int(getattr(buffer, "n_envs", 1)))
        buffer.sample_ages = ages  # type: ignore[attr-defined]
    return ages
