"""A vectorised NumPy sum tree for proportional prioritized replay (Schaul et al. 2016), with an exact minimum.

A 16-ary tree stored level by level (``sums[0]`` the root, ``sums[-1]`` the leaves, padded with zeros to
``16 ** depth``): the children of node ``i`` are row ``i`` of the next level reshaped to ``(-1, 16)``, so one gather
reads them all, and a 1M-leaf tree has 5 levels. Row sums and prefix sums over the 16 children are small matrix
products (BLAS), which is what makes the wide tree fast in NumPy: reductions along a short last axis are slow.
A batch descent and a batch update are a handful of NumPy calls per level, with no per-element Python loop and no
``np.add.at`` (duplicate indices write the same recomputed value). See benchmarks/scripts/replay_speed.py for the timings.

The smallest positive leaf (for the largest importance-sampling weight) is kept exactly without a min tree: it only
goes down when a smaller value is written, and is rescanned only when the leaf holding it changes (rare: the
lowest-priority transition is the least likely to be sampled, and FIFO reaches it once per pass).
"""

from __future__ import annotations

import numpy as np

BRANCHING = 16  # 8 and 32 measured close; 16 gives 5 levels for 1M leaves


def _count_true_per_row(mask: np.ndarray) -> np.ndarray:
    """Number of True per row of a C-contiguous ``(n, 16)`` bool array: a popcount of its bytes (NumPy >= 2)."""
    if hasattr(np, "bitwise_count"):
        counts = np.bitwise_count(mask.view(np.uint64))
        return (counts[:, 0] + counts[:, 1]).astype(np.int64)
    return mask.sum(axis=1)


class SumTree:
    """
    Sums of non-negative leaf values, their smallest positive value, and a batched proportional descent.

    :param capacity: number of leaves
    """

    def __init__(self, capacity: int) -> None:
        if not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ValueError(f"Invalid capacity={capacity!r}: expected a positive integer")
        self.capacity = int(capacity)
        depth = 1
        while BRANCHING**depth < self.capacity:
            depth += 1
        self.depth = depth
        self.sums = [np.zeros(BRANCHING**level, dtype=np.float64) for level in range(depth + 1)]
        self._upper = np.triu(np.ones((BRANCHING, BRANCHING)))  # x @ upper: prefix sums of each row
        self._ones = np.ones(BRANCHING)
        self._min = np.inf
        self._min_leaf = -1

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self.sums[0][0])

    @property
    def min(self) -> float:
        """Smallest positive leaf (+inf when none is positive)."""
        return self._min

    def leaves(self, indices: np.ndarray) -> np.ndarray:
        """Values of the leaves ``indices``."""
        return self.sums[-1][indices]

    def update(self, indices: np.ndarray, values: np.ndarray | float) -> None:
        """
        Set leaves ``indices`` to ``values`` (non-negative; for repeated indices one of their values is kept) and
        recompute their ancestors.

        :param indices: leaf indices in ``[0, capacity)``
        :param values: new leaf values, broadcast to ``indices``
        """
        nodes = np.asarray(indices, dtype=np.int64)
        values = np.broadcast_to(np.asarray(values, dtype=np.float64), nodes.shape)
        self.sums[-1][nodes] = values
        for level in range(self.depth - 1, -1, -1):
            nodes = nodes // BRANCHING
            self.sums[level][nodes] = np.take(self.sums[level + 1].reshape(-1, BRANCHING), nodes, axis=0) @ self._ones
        indices = np.asarray(indices)
        touched = self._min_leaf >= 0 and bool(np.any(indices == self._min_leaf))
        # The values the leaves hold now (with repeated indices, not every given value was kept)
        self._track_min(touched, indices, self.sums[-1][indices])

    def update_range(self, start: int, values: np.ndarray | float, count: int | None = None) -> None:
        """
        Set the contiguous leaves ``start, start + 1, ...`` to ``values`` (FIFO writes): the ancestors are contiguous
        too, so they are recomputed with slices instead of gathers.

        :param start: first leaf
        :param values: new leaf values (an array, or a scalar with ``count``)
        :param count: number of leaves when ``values`` is a scalar
        """
        values = np.asarray(values, dtype=np.float64)
        if values.ndim == 0:
            values = np.full(count or 1, float(values))
        low, high = start, start + len(values)
        if high > self.capacity:
            raise ValueError(f"Invalid range [{low}, {high}): beyond the capacity ({self.capacity})")
        self.sums[-1][low:high] = values
        for level in range(self.depth - 1, -1, -1):
            low, high = low // BRANCHING, (high - 1) // BRANCHING + 1
            children = self.sums[level + 1][low * BRANCHING : high * BRANCHING].reshape(-1, BRANCHING)
            self.sums[level][low:high] = children @ self._ones
        touched = start <= self._min_leaf < start + len(values)
        self._track_min(
            touched, np.arange(start, start + len(values)) if touched or values.min() < self._min else None, values
        )

    def _track_min(self, touched: bool, indices: np.ndarray | None, values: np.ndarray) -> None:
        """Keep the smallest positive leaf after ``indices`` were set to ``values`` (a rescan if its leaf changed)."""
        if touched:
            leaves = self.sums[-1]
            positive = np.where(leaves > 0, leaves, np.inf)
            self._min_leaf = int(np.argmin(positive))
            self._min = float(positive[self._min_leaf])
            if not np.isfinite(self._min):
                self._min_leaf = -1
            return
        if values.size == 0 or values.min() >= self._min:
            return  # the fast path: nothing written below the current minimum
        positive = np.where(values > 0, values, np.inf)
        smallest = int(np.argmin(positive))
        if positive[smallest] < self._min and indices is not None:
            self._min = float(positive[smallest])
            self._min_leaf = int(indices.reshape(-1)[smallest])

    def find(self, mass: np.ndarray) -> np.ndarray:
        """
        Leaf index of each ``mass`` in ``[0, total)``: the leaf ``j`` with ``cumsum[j-1] <= mass < cumsum[j]``
        (as ``np.searchsorted(np.cumsum(leaves), mass, side="right")``). Never returns a zero leaf: when rounding puts
        ``mass`` at or past a node's sum, the descent takes the node's last positive child.

        :param mass: cumulative masses, shape ``(batch,)``
        """
        mass = np.array(mass, dtype=np.float64)
        nodes = np.zeros(mass.shape, dtype=np.int64)
        row_starts = np.arange(len(mass)) * BRANCHING
        for level in range(1, self.depth + 1):
            children = np.take(self.sums[level].reshape(-1, BRANCHING), nodes, axis=0)
            prefix = children @ self._upper
            child = _count_true_per_row(prefix <= mass[:, None])
            over = child >= BRANCHING
            if over.any():
                # mass >= the node's sum (rounding): the last child with a positive value
                child[over] = BRANCHING - 1 - np.argmax(children[over, ::-1] > 0, axis=1)
            flat = row_starts + child
            mass -= np.take(prefix, flat) - np.take(children, flat)
            nodes *= BRANCHING
            nodes += child
        return nodes

    def sample(self, batch_size: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """
        Stratified proportional sample (Schaul et al. 2016, appendix B.2.1): ``[0, total)`` is split into
        ``batch_size`` equal segments and one leaf is drawn uniformly by mass from each.

        :param batch_size: number of leaves to draw
        :param rng: generator for the uniform draws; ``None`` uses NumPy's global state (as SB3's buffers)
        """
        uniform = rng.random(batch_size) if rng is not None else np.random.random_sample(batch_size)
        mass = (np.arange(batch_size) + uniform) * (self.total / batch_size)
        return self.find(mass)
