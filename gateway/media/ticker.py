"""One shared 20 ms timer for every stream of the process.

A timer per track means one event-loop wake-up per track per frame, at scattered phases. The
ticker keeps a single absolute grid (``origin + k * period``) and one armed timer for the earliest
tick anyone waits for; every stream whose slot falls on that tick is released by the same
callback. Streams align their schedules to the grid (``align``), so at any moment most waiters
share one or two ticks. Waiters are futures; a cancelled waiter is simply skipped.

While the process is sparse (fewer sessions than ``pack_below``) a new stream's schedule is packed
onto every ``PACK_TICKS``-th tick (a 10 ms grid: two ticks a frame) and the shared UDP sockets are
read by the fires, so a talker's datagram shares a wake-up with the others' and with the sends (a
dense one reads them when readable, as before); a dense process spreads its new streams over the
other ticks until they hold as many, then over every tick, so its bursts stay even and small
(docs/density.md, "Packed phases").
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
import weakref
from collections.abc import Callable, Iterable

from gateway.net import udp_mux

EPSILON = 1e-6
FIRE_SLACK_S = 0.0005  # a fire runs every tick due by then (senders release as early)
log = logging.getLogger(__name__)


_EARLY = "_gw_may_run_early"  # the attribute ``may_run_early`` sets


def may_run_early(callback: Callable[[], None]) -> Callable[[], None]:
    """Mark a ``call_after_sends`` callback that may run up to a grid tick before its tick, in
    the loop iteration of a socket read (``Ticker.fire_if_due``): a playout period, whose due
    time is already rounded down to the grid. Returns it (a function or lambda)."""
    setattr(callback, _EARLY, True)
    return callback


class Ticker:
    def __init__(
        self,
        period: float = 0.020,
        clock: Callable[[], float] = time.monotonic,
        loop: asyncio.AbstractEventLoop | None = None,
        poll_sockets: bool = False,
        pack_below: int = 0,
    ) -> None:
        """``poll_sockets``: while a fire is due within ``poll_window`` (a grid tick; packing:
        ``PACK_TICKS``), the loop's shared UDP sockets are off its selector and every fire reads
        them first (``--coalesce-ms``; ``--pack-below``: while it packs). ``pack_below``: while the
        loop's shared sockets serve fewer sessions (``udp_mux.sessions``, read at every fire),
        ``align`` and ``period_tick`` keep to every ``PACK_TICKS``-th tick, and from there to
        ``PACK_TICKS`` times as many new schedules avoid those ticks (``filling``); 0: never."""
        if period <= 0:
            raise ValueError("period must be positive")
        self.period = period
        self._clock = clock
        self.clock = clock  # the raw clock: a pacer reads it without a method call between
        self._loop = loop
        self._origin = clock()
        self._buckets: dict[int, list[asyncio.Future[None]]] = {}
        self._calls: dict[int, list[Callable[[], None]]] = {}
        self._later: dict[int, list[Callable[[], None]]] = {}  # call_after_sends
        # a tick is in the heap while any of these holds it
        self._tables: tuple[dict[int, list], ...] = (self._buckets, self._calls, self._later)
        self._heap: list[int] = []
        self._armed: tuple[int, asyncio.TimerHandle] | None = None
        self._hooks: dict[Callable[[], None], None] = {}  # run once at the end of every fire
        self.fired = 0  # timer callbacks run
        self.ran_early = 0  # ticks run from ``fire_if_due`` (no timer, no loop iteration)
        self.released = 0  # waiters released
        # What a tick's senders share, computed by the first of them and cleared at every
        # fire: the send time stamped into the tick's packets (they leave together, at the
        # end-of-tick flush), not read again for every stream.
        self.tick_stamp: tuple[int, int, bytes] | None = None
        self.firing = False  # inside ``_fire``: only then may a tick's senders share a stamp
        self.pack_below = pack_below
        self.packing = pack_below > 0  # new schedules keep to every PACK_TICKS-th tick now
        self.filling = False  # dense, the packed ticks hold their share: new ones go elsewhere
        self._fill_turn = 0
        self.poll_sockets = poll_sockets or pack_below > 0
        self.poll_window = period * (PACK_TICKS if pack_below > 0 else 1)
        self.polling = False  # the shared sockets are read by the fires now
        self._endpoints_seen = -1  # ``udp_mux.ENDPOINTS.version`` when packing was decided

    def now(self) -> float:
        return self._clock()

    def tick_at_or_after(self, t: float) -> int:
        return math.ceil((t - self._origin) / self.period - EPSILON)

    def time_of(self, tick: int) -> float:
        return self._origin + tick * self.period

    def align(self, t: float) -> float:
        """The first grid time at or after ``t`` where a new schedule starts: every
        ``PACK_TICKS``-th tick while ``packing``; any other tick while ``filling``."""
        tick = self.tick_at_or_after(t)
        if self.packing:
            tick = -(-tick // PACK_TICKS) * PACK_TICKS
        elif self.filling and tick % PACK_TICKS == 0:
            # one of the PACK_TICKS - 1 ticks after it, in turn: each gets as many
            self._fill_turn = (self._fill_turn + 1) % (PACK_TICKS - 1)
            tick += 1 + self._fill_turn
        return self.time_of(tick)

    def grid_time(self, t: float) -> float:
        """The first grid time at or after ``t``, every tick (``align`` may keep to fewer)."""
        return self.time_of(self.tick_at_or_after(t))

    def period_tick(self, t: float) -> int:
        """The grid tick a playout period due at ``t`` runs on: the last at or before ``t``
        (never late). While ``packing``, the first of every ``PACK_TICKS``-th at or after it:
        on the fires the sends make, whose reads feed it, and up to ``PACK_TICKS - 1`` ticks
        late rather than early, so a lost packet's repair keeps the time it had."""
        tick = self.tick_at_or_after(t)
        if self.packing:
            return -(-tick // PACK_TICKS) * PACK_TICKS
        if self.time_of(tick) > t + EPSILON:
            tick -= 1
        return tick

    def wake_at(self, t: float, waiter: asyncio.Future[None]) -> None:
        """Resolve ``waiter`` on the first tick at or after ``t``."""
        self._add(self._buckets, t, waiter)

    def call_at(self, t: float, callback: Callable[[], None]) -> None:
        """Run ``callback()`` on the first tick at or after ``t`` (no future, no task).

        Every stream re-arms through here once per packet, so the common case -- a tick
        someone already waits for -- is this one call (``_add`` inlined, no helper calls)."""
        tick = math.ceil((t - self._origin) / self.period - EPSILON)
        items = self._calls.get(tick)
        if items is not None:
            items.append(callback)
            return
        self._add(self._calls, t, callback)

    def call_after_sends(self, t: float, callback: Callable[[], None]) -> None:
        """As ``call_at``, but after that tick's ``call_at`` callbacks and end-of-tick hooks:
        for work that can wait a millisecond (a receive path's playout period: decode, VAD)
        and must not hold back the packets the tick sends."""
        self._add(self._later, t, callback)

    def _add(self, table: dict[int, list], t: float, item: object) -> None:
        tick = self.tick_at_or_after(t)
        items = table.get(tick)
        if items is not None:
            items.append(item)
            return
        new = tick not in self._buckets and tick not in self._calls and tick not in self._later
        table[tick] = [item]
        if new:
            heapq.heappush(self._heap, tick)
            # (inside ``_fire`` the timer is armed once, at its end, for the heap's earliest)
            if not self.firing and (self._armed is None or tick < self._armed[0]):
                self._arm(tick)

    def after_each_tick(self, hook: Callable[[], None]) -> None:
        """Run ``hook()`` at the end of every tick, after its callbacks (once, however often
        it is added): what a tick's callbacks queued leaves with the tick."""
        self._hooks[hook] = None

    async def sleep(self, delay: float) -> None:
        """``asyncio.sleep`` rounded up to the grid (the PacingClock's sleep)."""
        loop = self._loop or asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self.wake_at(self._clock() + delay, waiter)
        await waiter

    def _arm(self, tick: int) -> None:
        if self._armed is not None:
            self._armed[1].cancel()
        loop = self._loop or asyncio.get_running_loop()
        delay = max(0.0, self.time_of(tick) - self._clock())
        self._armed = (tick, loop.call_later(delay, self._fire))

    def fire_if_due(self) -> None:
        """Run what is due now, without waiting for the timer: the end of a socket read burst
        calls it (``udp_mux.after_reads``), in the loop iteration that read the datagrams, so
        a tick due then costs no loop iteration (a ``select``) of its own.

        - The earliest tick within ``_fire``'s own slack (0.5 ms: what a timer fire now would
          run, senders' ``EARLY_S`` too): that fire, here.
        - Else the earliest tick within one grid tick (``period``), when it holds only
          ``call_after_sends`` callbacks marked ``may_run_early`` (playout periods: no sends,
          no waiters, no word passes): they run now, at most a grid tick early -- the playout
          clock's own rounding (a period runs on the grid tick at or before its due time) by
          one tick more.
        """
        heap = self._heap
        if not heap or self.firing:
            return
        tick = heap[0]
        ahead = self._origin + tick * self.period - self._clock()
        if ahead <= EPSILON + FIRE_SLACK_S:
            self._disarm()
            self.ran_early += 1
            self._fire_due()
        elif (ahead <= self.period and tick not in self._calls and tick not in self._buckets
              and all(getattr(c, _EARLY, False) for c in self._later.get(tick, ()))):
            self._disarm()
            self.ran_early += 1
            heapq.heappop(heap)
            self.firing = True
            try:
                self._run(self._later.pop(tick, ()))
            finally:
                self.tick_stamp, self.firing = None, False
                if heap:
                    self._arm(heap[0])
                if self.poll_sockets:
                    self._poll_or_not()

    def _disarm(self) -> None:
        if self._armed is not None:
            self._armed[1].cancel()
            self._armed = None

    def _fire(self) -> None:
        self._armed = None
        self.fired += 1
        if self.polling:  # what came since the last fire, before the ticks it may feed
            self.firing = True  # (what the reads add to the heap waits for the arm below)
            try:
                udp_mux.read_polled(self._loop or asyncio.get_running_loop())
            finally:
                self.firing = False
        self._fire_due()

    def _poll_or_not(self) -> None:
        """Sockets read by the fires while the next fire is due within ``poll_window`` (and
        its slack): a busy grid; else back on the selector, read the moment a datagram comes.
        Packing is decided again here, at every fire, from the loop's sessions; a ticker that
        packs reads at its fires only while it packs. A dense one, woken every tick anyway,
        reads between them: its listeners' NACKs (a thousand a second at 2 % loss) answered
        at the start of a fire delayed that fire's sends (measured: docs/density.md)."""
        if self.pack_below and self._endpoints_seen != udp_mux.ENDPOINTS.version:
            # the packed ticks took the first pack_below streams: half each, as many as every
            # other tick holds once pack_below * PACK_TICKS are served, so until then new
            # streams fill the others (a dense gateway's ticks even: small bursts); counted
            # again only when a session came or went (a thousand fires a second otherwise)
            self._endpoints_seen = udp_mux.ENDPOINTS.version
            sessions = udp_mux.sessions(self._loop or asyncio.get_running_loop())
            self.packing = sessions < self.pack_below
            self.filling = not self.packing and sessions < self.pack_below * PACK_TICKS
        heap = self._heap
        polling = bool(heap) and (not self.pack_below or self.packing) and (
            self.time_of(heap[0]) - self._clock() <= self.poll_window + FIRE_SLACK_S + EPSILON)
        if polling != self.polling:
            self.polling = polling
            udp_mux.poll_sockets(self._loop or asyncio.get_running_loop(), polling)

    def _fire_due(self) -> None:
        """Every tick due now (within ``FIRE_SLACK_S``), their hooks, then what was deferred."""
        self.tick_stamp = None
        self.firing = True
        now = self._clock()
        heap, buckets, calls, later = self._heap, self._buckets, self._calls, self._later
        deferred: list[Callable[[], None]] = []
        try:
            while heap and self.time_of(heap[0]) <= now + EPSILON + FIRE_SLACK_S:
                tick = heapq.heappop(heap)
                # out of every table before anything runs: a callback may add to this tick
                waiters, due = buckets.pop(tick, ()), calls.pop(tick, ())
                deferred.extend(later.pop(tick, ()))
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
                        self.released += 1
                self._run(due)
            self._run(self._hooks, released=False, failed="end-of-tick hook failed")
            self._run(deferred)
        finally:
            self.tick_stamp, self.firing = None, False
            if heap:  # the one timer for what the callbacks added, and what waits
                self._arm(heap[0])
            if self.poll_sockets:
                self._poll_or_not()

    def _run(self, callbacks: Iterable[Callable[[], None]], released: bool = True,
             failed: str = "tick callback failed") -> None:
        for callback in callbacks:
            self.released += released
            try:
                callback()
            except Exception:  # one stream's failure must not stop the others' ticks
                log.exception(failed)

    @property
    def waiting(self) -> int:
        return sum(len(items) for table in self._tables for items in table.values())


_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = (
    weakref.WeakKeyDictionary()
)


GRID_S = 0.0025  # eight ticks per 20 ms frame: streams spread over them, smaller bursts
#: A packed stream's slots fall on every 4th tick of the 2.5 ms grid: 10 ms, two ticks a frame
#: (``pack_below``). Measured: a talker's loop CPU 0.74 of the spread grid's (docs/density.md).
PACK_TICKS = 4
#: ``--coalesce-ms`` choices (seconds): grid ticks that divide a 20 ms frame
COALESCE_GRIDS_S = (0.0025, 0.005, 0.010, 0.020)
#: A loop's ``coalesce`` grid and ``pack_below`` (a loop absent: ``GRID_S``, no packing,
#: sockets read when readable).
_COALESCE: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[float, int]] = (
    weakref.WeakKeyDictionary())


def check_coalesce_grid(grid_s: float) -> float:
    """``grid_s`` if it is 0 or one of ``COALESCE_GRIDS_S``, else ValueError naming them (in ms,
    as ``--coalesce-ms`` takes them)."""
    if grid_s and not any(abs(grid_s - g) < EPSILON for g in COALESCE_GRIDS_S):
        names = ", ".join(f"{ms:g}" for ms in (0, *(g * 1000 for g in COALESCE_GRIDS_S)))
        raise ValueError(f"a coalescing grid is one of {names} ms, not {grid_s * 1000:g}")
    return grid_s


def coalesce(loop: asyncio.AbstractEventLoop, grid_s: float, pack_below: int = 0) -> None:
    """What the shared ticker of ``loop`` made from now on does; the app calls this before it
    serves (streams already on the loop's ticker stay on it).

    - ``grid_s`` (``--coalesce-ms``, one of ``COALESCE_GRIDS_S``): a grid that long, the shared
      UDP sockets read at its fires while it is busy; ``pack_below`` is then ignored.
    - ``grid_s`` 0 and ``pack_below`` N (``--pack-below``): the ``GRID_S`` grid, packed while
      the loop serves fewer than N sessions (``Ticker``).
    - both 0: the ``GRID_S`` grid, unpacked, the sockets read when readable."""
    if pack_below < 0:
        raise ValueError("pack_below is a number of sessions, 0 or more")
    if check_coalesce_grid(grid_s) or pack_below:
        _COALESCE[loop] = (grid_s, 0 if grid_s else pack_below)
    else:
        _COALESCE.pop(loop, None)


def shared_ticker() -> Ticker:
    """The ticker of the running event loop (one per loop; its grid: ``coalesce``)."""
    loop = asyncio.get_running_loop()
    grid, pack_below = _COALESCE.get(loop, (0.0, 0))
    period, poll = (grid, True) if grid else (GRID_S, False)
    ticker = _TICKERS.get(loop)
    if (ticker is None or ticker.period != period or ticker.pack_below != pack_below
            or ticker.poll_sockets != (poll or pack_below > 0)):
        ticker = Ticker(period, loop=loop, poll_sockets=poll, pack_below=pack_below)
        _TICKERS[loop] = ticker
        udp_mux.after_reads(loop, ticker.fire_if_due)
    return ticker
