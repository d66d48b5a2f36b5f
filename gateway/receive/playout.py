"""The playout clock: one call per 20 ms period, as a callback of the process-wide ticker.

No task and no sleep of its own: each period is a ``Ticker.call_after_sends`` callback (run
once that tick's packets have left) on the shared 2.5 ms grid
(``gateway.media.ticker.shared_ticker``), so every receive path and every sender of the
process wakes on the same ticks. The schedule is absolute, as ``PacingClock``'s: period
``n`` is due at ``first_at + n * period`` (moved only by ``rephase``), and each callback runs
on the grid tick at or before its due time, so lateness never accumulates.

A period's callback that raises is logged (the first, then one in a thousand) and counted in
``errors``; the schedule goes on with the next period. Woken more than half a period late (the
event loop was busy), the clock first lets ``catch_up_hops`` loop iterations run, so datagrams
that queued up meanwhile reach the jitter buffer before the overdue period plays. Late by more
than ``cover_s`` (what the output buffer covers), the periods that went by are skipped and
counted rather than played in a burst.

``stop()`` ends it for good: the pending ticker callback (the ticker cannot take one back) and a
pending catch-up hop both find the clock stopped and do nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.media.ticker import may_run_early, shared_ticker

log = logging.getLogger(__name__)


class TickScheduler(Protocol):
    """What the clock needs of ``gateway.media.ticker.Ticker``."""

    def now(self) -> float: ...
    def tick_at_or_after(self, t: float) -> int: ...
    def period_tick(self, t: float) -> int: ...
    def time_of(self, tick: int) -> float: ...
    def call_after_sends(self, t: float, callback: Callable[[], None]) -> None: ...


@dataclass(slots=True)
class PlayoutClockStats:
    periods: int = 0  # period callbacks run (failed ones included)
    errors: int = 0  # ... that raised (and rephase calls that did)
    late_wakeups: int = 0  # woken more than half a period late (caught up first)
    clock_stalls: int = 0  # woken later than the output buffer covers
    skipped_periods: int = 0  # ... periods that went by unplayed


class PlayoutClock:
    def __init__(
        self,
        period: Callable[[float], None],
        *,
        period_s: float,
        cover_s: float,
        rephase: Callable[[float], float] | None = None,
        ticker: TickScheduler | None = None,
        catch_up_hops: int = 4,
    ) -> None:
        """``period(now)`` plays one period; ``rephase(due)`` may move the next due time."""
        self._period = period
        self._period_s = period_s
        self._cover_s = cover_s
        self._rephase = rephase
        self._ticker = ticker
        self._hops = catch_up_hops
        self._next_at = 0.0
        self._tick_at = 0.0  # the grid time the armed period's callback is due
        self._generation = 0  # bumped by stop(): callbacks of an older one do nothing
        self._running = False
        self._hop: asyncio.Handle | None = None
        self._tick: Callable[[], None] | None = None  # while running (it holds the clock)
        self.stats = PlayoutClockStats()

    @property
    def running(self) -> bool:
        return self._running

    @property
    def next_at(self) -> float:
        """When the next period is due (its callback runs on the grid tick at or before it)."""
        return self._next_at

    def start(self, first_at: float) -> None:
        """Play the first period at ``first_at`` (monotonic seconds) and every period after."""
        if self._running:
            return
        if self._ticker is None:
            self._ticker = shared_ticker()
        self._running = True
        self._next_at = first_at
        generation = self._generation  # one closure per start for every period, not one each
        # (it may run up to a grid tick early, in a socket read's iteration: Ticker.fire_if_due)
        self._tick = may_run_early(lambda: self._on_tick(generation))
        self._arm()

    def stop(self) -> None:
        self._running = False
        self._generation += 1
        self._tick = None  # (no cycle left: a pending one finds its generation gone)
        if self._hop is not None:
            self._hop.cancel()
            self._hop = None

    def _arm(self) -> None:
        ticker = self._ticker
        assert ticker is not None
        if self._rephase is not None:
            try:
                self._next_at = self._rephase(self._next_at)
            except Exception:  # keep the schedule as it was rather than lose it
                self._failed("playout rephase failed")
        # the grid tick at or before the due time: never start a period late (while the
        # ticker packs, the packed tick at or after it: Ticker.period_tick)
        tick = ticker.period_tick(self._next_at)
        self._tick_at = ticker.time_of(tick)
        # after the tick's packets left: a period (decode, VAD) must not hold back the sends
        assert self._tick is not None  # (armed only while running)
        ticker.call_after_sends(ticker.time_of(tick), self._tick)

    def _on_tick(self, generation: int) -> None:
        if generation != self._generation:
            return
        assert self._ticker is not None
        now = self._ticker.now()
        if self._hops and now - self._tick_at > self._period_s / 2:  # (the fire came late)
            self.stats.late_wakeups += 1
            self._catch_up(generation, self._hops)
            return
        self._run(generation, now)  # (the same clock read: nothing ran in between)

    def _catch_up(self, generation: int, hops: int) -> None:
        """One event-loop iteration per hop (each lets queued datagrams through), then play."""
        self._hop = None
        if generation != self._generation:
            return
        if hops:
            loop = asyncio.get_running_loop()
            self._hop = loop.call_soon(self._catch_up, generation, hops - 1)
            return
        self._run(generation)

    def _failed(self, what: str) -> None:
        self.stats.errors += 1
        if self.stats.errors == 1 or self.stats.errors % 1000 == 0:
            log.exception("%s (%d errors so far)", what, self.stats.errors)

    def _run(self, generation: int, now: float | None = None) -> None:
        assert self._ticker is not None
        if now is None:
            now = self._ticker.now()
        if now - self._next_at > self._cover_s:
            missed = int((now - self._next_at) / self._period_s)
            self.stats.clock_stalls += 1
            self.stats.skipped_periods += missed
            self._next_at += missed * self._period_s
        self.stats.periods += 1
        try:
            self._period(now)
        except Exception:  # one bad period must not end playout
            self._failed("playout period failed")
        self._next_at += self._period_s
        if generation == self._generation:  # (the period may have stopped the clock)
            self._arm()
