"""How deep the jitter buffer must be for repairs to come in time, learnt from the ones that
did not.

A NACK repair (or RED copy) of the first packets of a loss burst can only be asked for once the
packet after the burst shows the gap: for a burst of three 20 ms packets that is 60 ms after
the first was due to arrive, later than a three-frame buffer plays it. The playout then stalls
(an underrun), the repair comes, and it plays late: the stall is added latency, and the next
burst stalls again. :class:`RepairFloor` keeps such stalls as buffer instead: each stall that a
NACK repair ended raises the jitter buffer's floor by the stall's length (to at most the
largest target), so the next burst of that length is repaired in time; after ``hold_s`` with
no such stall the floor comes down one frame (then the target follows as jitter allows, and the
surplus is trimmed in silence). Stalls no repair ended (delay spikes: the jitter target covers
them; pauses) change nothing.
"""

from __future__ import annotations


class RepairFloor:
    def __init__(self, base: int, top: int, hold_s: float = 10.0) -> None:
        self.base = base
        self.top = max(base, top)
        self.hold_s = hold_s
        self.extra = 0
        self.raises = 0
        self._since: float | None = None

    def stalled_for_repair(self, periods: int, now: float) -> None:
        """A stall of ``periods`` ended with a repair that came late."""
        if self.hold_s <= 0 or periods <= 0:
            return
        self.raises += 1
        self.extra = min(self.top - self.base, self.extra + periods)
        self._since = now

    def frames(self, now: float) -> int:
        """The floor now (lowered one frame per ``hold_s`` without a late repair)."""
        if self.extra and self._since is not None and now - self._since >= self.hold_s:
            self.extra -= 1
            self._since = now
        return self.base + self.extra
