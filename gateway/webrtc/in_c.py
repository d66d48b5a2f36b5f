"""The streams C sends, per ticker (``BatchStream._to_c``, webrtc/batch_sender.py).

A stream on the compiled path (DTX too) is handed to its C struct (net/sendpath.py
``gw_run_parked``) until something needs it back on the tick (``BatchStream._from_c``). This
registry runs every compiled batch they are on from the end of each tick, before the tick's
packets are flushed; visits each stream C asks for (its fed frames low: ``Held.sent_from_c``
records what C sent and feeds more); keeps the grid ticking for them; and checks each stream's
path every ``CHECK_EVERY_S`` (docs/density.md, "A stream sent from C", "Speech fed
ahead").
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections import deque
from typing import Any, Protocol

from gateway.media.ticker import Ticker
from gateway.net import udp_mux
from gateway.rtp.header import send_stamp

MAX_CATCH_UP = 5  # frames one late tick may send for a stream; longer stalls re-anchor (pacer)
EARLY_S = 0.0005  # how early a slot may be released (PacingClock.release_due's default)
# A stream held in C has its path (transport connected, socket open, the same nominated pair)
# checked every second: a backstop -- another pair nominated takes it back at once
# (aiortc_compat.NominatedPairs), and a closed transport or socket is its session's close.
# Each check is a few cache misses on the stream's aiortc objects: every 100 ms, it was 7 % of
# the loop at 1,000 streams (docs/density.md, "Speech fed ahead"). They run in batches, every
# ``CHECK_GRAIN_S`` a tenth of the streams, after the tick's packets are out: a warm run of
# checks, not three cold ones at the end of every tick.
CHECK_EVERY_S = 1.0
CHECK_GRAIN_S = 0.1


class Held(Protocol):
    """What the registry asks of a stream it holds (``BatchStream``)."""

    def sent_from_c(self, now: float) -> None: ...

    def path_still_valid(self) -> bool: ...

    def back_to_tick(self) -> None: ...

    def failed(self, exc: Exception) -> None: ...


class HeldInC:
    """The streams of one ticker that C sends, by handle, and each shared socket's compiled
    batch they are on: run at the end of every tick, before the tick's packets are flushed;
    each stream C then asks for records the speech frames C sent, tells their owners and feeds
    more (``sent_from_c``)."""

    __slots__ = ("__weakref__", "batches", "checks", "next_check", "streams", "ticker")

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = weakref.ref(ticker)  # (the registry's key: a strong one would pin it)
        self.batches: dict[object, udp_mux.UdpMux] = {}  # CompiledBatch -> its socket
        self.streams: dict[int, Held] = {}
        #: handles in the order their path is checked again (``check_some``); a handle no
        #: longer in ``streams`` is dropped when its turn comes
        self.checks: deque[int] = deque()
        self.next_check = 0.0  # the ticker's time of the next batch of path checks

    def add(self, handle: int, stream: Held, in_c: tuple[Any, udp_mux.UdpMux, Any]
            ) -> None:
        batch, mux, _ = in_c
        self.batches[batch] = mux
        self.streams[handle] = stream
        self.checks.append(handle)

    def remove(self, handle: int, in_c: tuple[Any, udp_mux.UdpMux, Any]) -> None:
        self.streams.pop(handle, None)
        batch = in_c[0]
        if not batch.parked:  # type: ignore[attr-defined]
            self.batches.pop(batch, None)

    def end_of_tick(self) -> None:
        ticker = self.ticker()
        if ticker is None or not self.batches:
            udp_mux.flush_pending()
            return
        now = ticker.clock()
        try:
            self._run(ticker, now)
        finally:  # (whatever failed: the tick's packets leave)
            udp_mux.flush_pending()
        if now >= self.next_check:
            self.next_check = now + CHECK_GRAIN_S
            self.check_some()

    def _run(self, ticker: Ticker, now: float) -> None:
        """The tick's run of every batch (``end_of_tick``: there are some)."""
        stamp = ticker.tick_stamp or send_stamp()
        earliest = math.inf
        streams = self.streams
        for batch, mux in tuple(self.batches.items()):
            staged, due, consumed = batch.run_parked(  # type: ignore[attr-defined]
                now, stamp[0], stamp[1], EARLY_S, MAX_CATCH_UP
            )
            if staged:
                mux.staged(flushed_by_caller=True)  # (end_of_tick flushes: no call_soon)
            if due < earliest:
                earliest = due
            if consumed is not None:
                # (a copy: a stream taken back meanwhile may move C's array)
                for handle in consumed.tolist():
                    stream = streams.get(handle)
                    if stream is None:
                        continue  # taken back meanwhile: what C sent was recorded then
                    try:
                        stream.sent_from_c(now)
                    except Exception as exc:  # that stream's; the others go on
                        stream.failed(exc)
        if earliest < math.inf:  # keep the grid ticking for them
            ticker.call_at(earliest, _keep_ticking)

    def check_some(self) -> None:
        """Check the path of a share of the streams C holds (run every ``CHECK_GRAIN_S``),
        so each is checked every ``CHECK_EVERY_S``: one whose transport closed, socket closed
        or nominated pair moved goes back to the tick, whose sends handle it."""
        checks, streams = self.checks, self.streams
        share = math.ceil(len(streams) * CHECK_GRAIN_S / CHECK_EVERY_S)
        for _ in range(min(len(checks), share)):
            handle = checks.popleft()
            stream = streams.get(handle)
            if stream is None:
                continue  # taken back meanwhile
            if stream.path_still_valid():
                checks.append(handle)
            else:
                stream.back_to_tick()


def _keep_ticking() -> None:
    """A tick a stream sent from C waits for (its work is the end-of-tick hook's)."""


_HELD: weakref.WeakKeyDictionary[Ticker, HeldInC] = weakref.WeakKeyDictionary()
_HANDLES = itertools.count(1)


def held_in_c(ticker: Ticker) -> HeldInC:
    """The ticker's registry (made on first use)."""
    held = _HELD.get(ticker)
    if held is None:
        held = _HELD[ticker] = HeldInC(ticker)
    return held


def next_handle() -> int:
    """A new name for a stream handed to C (never reused while the process lives: a stale
    entry of C's list of frames sent cannot name another stream)."""
    return next(_HANDLES) & 0xFFFFFFFF


