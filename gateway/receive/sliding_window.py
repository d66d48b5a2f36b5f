"""Order statistics of the last ``size`` values, kept sorted as values come and go (no sort).

``add`` inserts with ``bisect.insort`` and drops the oldest value once the window is full, so a
quantile or the minimum is one index away: the per-packet cost is a bisection and a short
memmove of at most ``size`` floats, instead of sorting the whole window on every packet.
``order`` (arrival order) and ``ordered`` (sorted) are public for a caller that adds once per
packet and writes ``add`` out (``JitterTarget.measure``): read them, change them only as
``add`` does.
"""

from __future__ import annotations

import bisect
from collections import deque


class SlidingWindow:
    __slots__ = ("order", "ordered")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("the window needs at least one value")
        self.order: deque[float] = deque(maxlen=size)  # arrival order, for eviction
        self.ordered: list[float] = []

    def add(self, value: float) -> None:
        order = self.order
        if len(order) == order.maxlen:
            oldest = order[0]
            del self.ordered[bisect.bisect_left(self.ordered, oldest)]
        order.append(value)
        bisect.insort(self.ordered, value)

    def clear(self) -> None:
        self.order.clear()
        self.ordered.clear()

    def __len__(self) -> int:
        return len(self.ordered)

    def at(self, rank: int) -> float:
        """The ``rank``-th smallest value (0: the minimum)."""
        return self.ordered[rank]

    def minimum(self) -> float:
        return self.ordered[0]

    def quantile(self, q: float) -> float:
        """``sorted(window)[min(n - 1, int(q * n))]``: the upper ``q`` quantile."""
        n = len(self.ordered)
        return self.ordered[min(n - 1, int(q * n))]
