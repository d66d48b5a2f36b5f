"""Real-time pacing on the monotonic clock: an absolute schedule, so errors never accumulate.

Slot ``n`` is due at ``origin + n * period``. Waiting computes each deadline from the origin, not
from the previous wake-up, so a late wake-up is not carried into the next slot (no drift). If the
process stalls for longer than ``max_lateness`` the schedule is re-anchored at "now" instead of
bursting out every overdue frame at once (a receiver would see the burst as jitter and loss).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(slots=True)
class PacerStats:
    slots: int = 0
    late_slots: int = 0  # woke up more than 5 ms after the deadline
    rebases: int = 0  # schedule re-anchored after a stall
    max_lateness_s: float = 0.0


class PacingClock:
    """The absolute 20 ms schedule of one stream."""

    __slots__ = ("_align", "_origin", "_realign", "_sleep", "_slot", "clock", "max_lateness",
                 "period", "stats")

    def __init__(
        self,
        period: float = 0.020,
        max_lateness: float = 0.100,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        align: Callable[[float], float] | None = None,
        realign: Callable[[float], float] | None = None,
    ) -> None:
        """``align`` snaps where the schedule starts (and restarts after a stall) to a shared
        grid; ``realign`` (default ``align``) where ``reopen_last`` restarts it: the nearest
        grid time, where ``align`` may keep to fewer ticks (``Ticker.align`` while packing)."""
        if period <= 0:
            raise ValueError("period must be positive")
        self.period = period
        self.max_lateness = max_lateness
        self.clock = clock
        self._sleep = sleep
        self._align = align  # snaps the schedule's origin to a shared grid (see Ticker)
        self._realign = realign or align
        self._origin: float | None = None
        self._slot = 0  # index of the next slot to be released
        self.stats = PacerStats()

    @property
    def started(self) -> bool:
        return self._origin is not None

    @property
    def next_slot(self) -> int:
        return self._slot

    def now(self) -> float:
        return self.clock()

    def deadline(self, slot: int | None = None) -> float:
        """When ``slot`` (default: the next one) is due. Starts the schedule if needed."""
        if self._origin is None:
            now = self.clock()
            self._origin = self._align(now) if self._align is not None else now
        return self._origin + (self._slot if slot is None else slot) * self.period

    def time_to_next(self, now: float | None = None) -> float:
        """Seconds until the next slot is due (negative when overdue); ``now``: a clock reading
        the caller already has."""
        return self.deadline() - (self.clock() if now is None else now)

    async def wait_due(self) -> None:
        """Sleep until the next slot is due (returns at once when it already is)."""
        delay = self.time_to_next()
        if delay > 0:
            await self._sleep(delay)

    async def wait_next(self) -> int:
        """Sleep until the next slot is due, release it and return its index (0, 1, 2, ...)."""
        await self.wait_due()
        return self.release()

    def reopen_last(self, at: float) -> float:
        """Take back the last released slot (one that carried no packet: DTX) and make it due
        at ``at`` (snapped to the grid): the schedule restarts there, a period apart as before.
        Returns how much later than before the schedule now runs (s): a sender adds it to its
        media clock, so timestamps keep following real time."""
        if self._origin is None or self._slot == 0:
            return 0.0
        self._slot -= 1
        due = self._realign(at) if self._realign is not None else at
        shift = due - (self._origin + self._slot * self.period)
        self._origin = due - self._slot * self.period
        return shift

    def release_due(self, now: float, limit: int,
                    early: float = 0.0005) -> tuple[range, float]:
        """Release, in one call, every slot due by ``now + early`` (at most ``limit``): the
        batch path's tick asks this once per stream instead of a ``time_to_next`` and a
        ``release`` per packet. Returns the released slots' indexes and when the next slot
        is due (what the stream re-arms its tick for). Accounting as ``release`` per slot,
        a stall re-anchoring the schedule (its following slot is then a period away)."""
        origin = self._origin
        if origin is None:
            origin = self._origin = self._align(now) if self._align is not None else now
        period, first = self.period, self._slot
        slot = first
        stats = self.stats
        due = origin + slot * period
        while slot - first < limit and due - now <= early:
            lateness = now - due
            slot += 1
            stats.slots += 1
            if lateness > 0.005:
                stats.late_slots += 1
                if lateness > stats.max_lateness_s:
                    stats.max_lateness_s = lateness
            if lateness > self.max_lateness:  # a stall: the next slot a period from now
                origin += lateness
                if self._align is not None:
                    origin = self._align(origin)
                self._origin = origin
                stats.rebases += 1
            due = origin + slot * period
        self._slot = slot
        return range(first, slot), due

    def handover(self) -> tuple[float, int]:
        """(origin, next slot) for a sender that releases slots elsewhere for a while (the
        compiled path's parked sender, net/sendpath.py), as ``release_due`` would; started if
        need be. ``take_back`` with what it did."""
        self.deadline()
        assert self._origin is not None
        return self._origin, self._slot

    def take_back(self, origin: float, slot: int, released: int, late: int, rebases: int,
                  max_lateness: float) -> None:
        """The schedule as the sender ``handover`` handed it to left it, with its accounting."""
        self._origin, self._slot = origin, slot
        stats = self.stats
        stats.slots += released
        stats.late_slots += late
        stats.rebases += rebases
        if max_lateness > stats.max_lateness_s:
            stats.max_lateness_s = max_lateness

    def release(self, now: float | None = None) -> int:
        """Account for releasing the next slot now (on time, early or late); return its index."""
        due = self.deadline()
        lateness = (self.clock() if now is None else now) - due
        slot = self._slot
        self._slot += 1
        self.stats.slots += 1
        if lateness > 0.005:
            self.stats.late_slots += 1
            self.stats.max_lateness_s = max(self.stats.max_lateness_s, lateness)
        if lateness > self.max_lateness:
            # A stall: re-anchor so the following slot is one period from now.
            assert self._origin is not None
            self._origin += lateness
            if self._align is not None:
                self._origin = self._align(self._origin)
            self.stats.rebases += 1
        return slot
