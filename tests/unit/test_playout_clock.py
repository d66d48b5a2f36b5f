"""The playout clock: tick callbacks of the shared ticker on an absolute schedule; a failing
period is counted and the schedule goes on; stop() is final; a stall skips periods."""

import asyncio
import logging
import math

import pytest

from gateway.media.ticker import shared_ticker
from gateway.receive.playout import PlayoutClock
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from tests.opus_streams import SSRC, encode, packetize, speechy

PERIOD = 0.020
GRID = 0.0025


class FakeTicker:
    """The ticker's interface on a virtual clock; ``late`` delays a firing by that much."""

    def __init__(self) -> None:
        self.t = 0.0
        self.pending: list[tuple[float, int, object]] = []
        self._order = 0
        self.late = lambda due: 0.0

    def now(self) -> float:
        return self.t

    def tick_at_or_after(self, t: float) -> int:
        return math.ceil(t / GRID - 1e-6)

    def time_of(self, tick: int) -> float:
        return tick * GRID

    def period_tick(self, t: float) -> int:
        tick = self.tick_at_or_after(t)
        return tick - 1 if self.time_of(tick) > t + 1e-6 else tick

    def call_after_sends(self, t: float, callback) -> None:
        self._order += 1
        due = self.time_of(self.tick_at_or_after(t))
        self.pending.append((due, self._order, callback))

    def advance(self, until: float) -> None:
        while self.pending:
            self.pending.sort(key=lambda c: (c[0], c[1]))
            due, _, callback = self.pending[0]
            if due > until:
                break
            self.pending.pop(0)
            self.t = max(self.t, due + self.late(due))
            callback()
        self.t = max(self.t, until)


def clock_with(ticker, period, **options) -> PlayoutClock:
    options.setdefault("catch_up_hops", 0)
    return PlayoutClock(period, period_s=PERIOD, cover_s=4 * PERIOD, ticker=ticker, **options)


def test_periods_run_on_the_grid_tick_at_or_before_an_absolute_schedule():
    ticker = FakeTicker()
    ticker.late = lambda due: 0.004 if round(due / GRID) % 3 == 0 else 0.0  # a busy loop
    seen: list[float] = []
    clock = clock_with(ticker, seen.append)
    first = 0.0137
    clock.start(first)
    ticker.advance(2.0)
    assert len(seen) == 100 and clock.stats.periods == 100
    for k, now in enumerate(seen):
        due = first + k * PERIOD
        grid = math.floor(due / GRID + 1e-6) * GRID  # never after its due time ...
        assert now in (pytest.approx(grid), pytest.approx(grid + 0.004))  # ... but when woken
    assert clock.next_at == pytest.approx(first + 100 * PERIOD)  # no drift from lateness
    assert clock.stats.errors == 0


class PackingTicker(FakeTicker):
    """A ticker that packs (``Ticker.period_tick``): periods on every 4th tick at or after."""

    def period_tick(self, t: float) -> int:
        return -(-self.tick_at_or_after(t) // 4) * 4


def test_a_packing_ticker_runs_periods_on_its_packed_ticks_at_or_after_and_not_late():
    ticker = PackingTicker()
    ticker.late = lambda due: 0.004  # every fire 4 ms late: a busy loop, not a stalled one
    seen: list[float] = []
    clock = clock_with(ticker, seen.append, catch_up_hops=4)
    first = 0.0126  # (its packed tick is 7.4 ms after it: 11.4 ms with the fire's lateness)
    clock.start(first)
    ticker.advance(2.0)
    assert len(seen) == 100
    for k, now in enumerate(seen):
        due = first + k * PERIOD
        tick = now - 0.004
        assert round(tick / GRID) % 4 == 0 and due - 1e-9 <= tick < due + 4 * GRID
    # lateness is counted from the tick a period was armed for, not from its due time
    assert clock.stats.late_wakeups == 0 and clock.stats.clock_stalls == 0


def test_a_failing_period_is_logged_counted_and_the_schedule_goes_on(caplog):
    ticker = FakeTicker()
    calls: list[float] = []

    def period(now: float) -> None:
        calls.append(now)
        if len(calls) in (3, 4):
            raise ValueError("a bug in one period")

    clock = clock_with(ticker, period)
    clock.start(0.0)
    with caplog.at_level(logging.ERROR, logger="gateway.receive.playout"):
        ticker.advance(0.2)
    assert len(calls) == 11 and clock.running
    assert clock.stats.errors == 2
    assert [r.message for r in caplog.records] == ["playout period failed (1 errors so far)"]


def test_a_failing_rephase_keeps_the_schedule():
    ticker = FakeTicker()
    calls: list[float] = []

    def rephase(due: float) -> float:
        if len(calls) == 2:
            raise ValueError("bad phase")
        return due

    clock = clock_with(ticker, calls.append, rephase=rephase)
    clock.start(0.0)
    ticker.advance(0.1)
    assert len(calls) == 6 and clock.stats.errors == 1


def test_stop_is_final_even_with_a_callback_pending_on_the_ticker():
    ticker = FakeTicker()
    calls: list[float] = []
    clock = clock_with(ticker, calls.append)
    clock.start(0.0)
    ticker.advance(0.05)
    assert len(calls) == 3 and len(ticker.pending) == 1  # (the ticker cannot take one back)
    clock.stop()
    ticker.advance(1.0)
    assert len(calls) == 3 and not ticker.pending and not clock.running
    clock.start(2.0)  # a new start is a new schedule, not the old callbacks
    ticker.advance(2.05)
    assert len(calls) == 6


def test_a_period_may_stop_its_own_clock():
    ticker = FakeTicker()
    clock: PlayoutClock

    def period(now: float) -> None:
        clock.stop()

    clock = clock_with(ticker, period)
    clock.start(0.0)
    ticker.advance(1.0)
    assert clock.stats.periods == 1 and not ticker.pending


def test_a_stall_longer_than_the_output_buffer_skips_periods():
    ticker = FakeTicker()
    ticker.late = lambda due: 0.2 if 0.1 <= due < 0.1 + GRID else 0.0  # one 200 ms stall
    seen: list[float] = []
    clock = clock_with(ticker, seen.append)
    clock.start(0.0)
    ticker.advance(1.0)
    assert clock.stats.clock_stalls == 1 and clock.stats.skipped_periods == 10
    assert len(seen) + clock.stats.skipped_periods == 51  # every period played or skipped
    assert seen[-1] == pytest.approx(1.0)  # back on the schedule


async def test_woken_late_the_clock_lets_queued_datagrams_through_first():
    ticker = FakeTicker()
    ticker.late = lambda due: 0.015  # more than half a period
    order: list[str] = []
    played = asyncio.Event()

    def period(now: float) -> None:
        order.append("period")
        played.set()

    clock = clock_with(ticker, period, catch_up_hops=4)
    clock.start(0.0)
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: loop.call_soon(lambda: order.append("datagram")))  # 2 hops away
    ticker.advance(0.0)
    await asyncio.wait_for(played.wait(), 1.0)
    assert order == ["datagram", "period"] and clock.stats.late_wakeups == 1
    clock.stop()


# -- the receive path on the real shared ticker -------------------------------------------


def real_time(loop, packets, t0: float, path: ReceivePath) -> list[asyncio.TimerHandle]:
    return [
        loop.call_at(t0 + p.at, path.on_packet, p.seq, p.ts, p.payload, SSRC, t0 + p.at)
        for p in packets
    ]


async def test_receive_path_plays_on_the_shared_ticker_with_no_task_of_its_own():
    payloads = encode(speechy(1.2), 20)
    gap = set(range(20, 45))  # 0.5 s muted in the middle: nothing sent
    packets = packetize(payloads, 20, not_sent=gap)
    sent_rtcp: list[bytes] = []

    async def send(data: bytes) -> bool:
        sent_rtcp.append(data)
        return True

    path = ReceivePath(ReceivePathConfig(), send, lambda: 1)  # NACK on: its one task
    loop = asyncio.get_running_loop()
    ticker = shared_ticker()
    released = ticker.released
    tasks = asyncio.all_tasks()
    path.start()
    handles = real_time(loop, packets, loop.time(), path)
    try:
        await asyncio.wait_for(path.wait_periods(3), 2.0)
        assert {t.get_name() for t in asyncio.all_tasks() - tasks} == {"nack-sender"}
        await asyncio.wait_for(path.wait_played(packets[-1].seq), 5.0)
    finally:
        for handle in handles:
            handle.cancel()
        await path.close()
    assert ticker.released - released >= path.periods  # one tick callback per period
    stats = path.stats
    assert sent_rtcp == []  # a pause asks for nothing
    assert (stats.lost, stats.concealed, stats.pauses) == (0, 0, 1), stats
    assert stats.played == len(packets)
    assert not path.running and asyncio.all_tasks() <= tasks | {asyncio.current_task()}


async def test_a_period_that_raises_is_counted_and_playout_goes_on(caplog):
    packets = packetize(encode(speechy(0.6), 20), 20)
    path = ReceivePath(ReceivePathConfig(nack=False))
    decode = path.decoder.decode
    failures = [3]

    def flaky(result, *args):
        if failures[0]:
            failures[0] -= 1
            raise RuntimeError("decoder bug")
        return decode(result, *args)

    path.decoder.decode = flaky  # type: ignore[method-assign]
    loop = asyncio.get_running_loop()
    path.start()
    handles = real_time(loop, packets, loop.time(), path)
    try:
        with caplog.at_level(logging.ERROR, logger="gateway.receive.playout"):
            await asyncio.wait_for(path.wait_played(packets[-1].seq), 5.0)
    finally:
        for handle in handles:
            handle.cancel()
        await path.close()
    assert path.stats.period_errors == 3 and path.stats.played >= len(packets) - 3
    assert len(caplog.records) == 1  # the first is logged, with its traceback


def test_a_stopped_clock_and_a_decoder_are_freed_by_refcount_alone():
    """The clock's one callback per start holds it (a cycle while it runs); stop() lets go of
    it, so a stopped clock -- and a decoder with its C or ctypes call -- needs no GC pass."""
    import gc
    import weakref

    from gateway.media.opus_codec import OpusFrameDecoder

    ticker = FakeTicker()
    played: list[float] = []
    clock = clock_with(ticker, played.append)
    clock.start(0.0)
    ticker.advance(0.1)
    assert len(played) == 6
    clock.stop()
    ticker.advance(0.2)  # the pending callback finds its generation gone
    assert len(played) == 6
    decoder = OpusFrameDecoder()
    refs = [weakref.ref(clock), weakref.ref(decoder)]
    gc.disable()
    try:
        del clock, decoder
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()
