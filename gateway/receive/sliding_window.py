"""Order statistics of the last ``size`` values, kept sorted as values come and go (no sort).

``add`` inserts with ``bisect.insort`` and drops the oldest value once the window is full, so a
quantile or the minimum is one index away: the per-packet cost is a bisection and a short
memmove of at most ``size`` floats, instead of sorting the whole window on every packet.
"""

from __future__ import annotations

import bisect
from collections import deque


class SlidingWindow:
    __slots__ = ("_order", "_sorted")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("the window needs at least one value")
        self._order: deque[float] = deque(maxlen=size)  # arrival order, for eviction
        self._sorted: list[float] = []

    def add(self, value: float) -> list[float]:
        """Add ``value`` (the oldest dropped once full); returns the window sorted, for a caller
        reading an order statistic of each add without a call more (read it, do not change it:
        ``JitterTarget.measure``)."""
        order = self._order
        if len(order) == order.maxlen:
            oldest = order[0]
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]
        order.append(value)
        bisect.insort(self._sorted, value)
        return self._sorted

    def clear(self) -> None:
        self._order.clear()
        self._sorted.clear()

    def __len__(self) -> int:
        return len(self._sorted)

    def at(self, rank: int) -> float:
        """The ``rank``-th smallest value (0: the minimum)."""
        return self._sorted[rank]

    def minimum(self) -> float:
        return self._sorted[0]

    def quantile(self, q: float) -> float:
        """``sorted(window)[min(n - 1, int(q * n))]``: the upper ``q`` quantile."""
        n = len(self._sorted)
        return self._sorted[min(n - 1, int(q * n))]
