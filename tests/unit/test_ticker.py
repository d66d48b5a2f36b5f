"""The shared ticker: one timer releases every stream due on a tick."""

import asyncio

import pytest

from gateway.media.pacer import PacingClock
from gateway.media.ticker import Ticker, shared_ticker


async def test_many_waiters_on_one_tick_share_one_timer_callback():
    ticker = Ticker(period=0.005)
    loop = asyncio.get_running_loop()
    target = ticker.align(ticker.now() + 0.006)
    waiters = [loop.create_future() for _ in range(200)]
    for w in waiters:
        ticker.wake_at(target, w)
    assert ticker.waiting == 200
    await asyncio.gather(*waiters)
    assert ticker.fired == 1 and ticker.released == 200
    assert ticker.now() >= target - 0.0006


async def test_earlier_tick_rearms_and_cancelled_waiters_are_skipped():
    ticker = Ticker(period=0.005)
    loop = asyncio.get_running_loop()
    late, early, cancelled = (loop.create_future() for _ in range(3))
    ticker.wake_at(ticker.now() + 0.030, late)
    ticker.wake_at(ticker.now() + 0.006, early)
    ticker.wake_at(ticker.now() + 0.006, cancelled)
    cancelled.cancel()
    await early
    assert not late.done() and ticker.released == 1
    await late
    assert ticker.released == 2


def test_grid_alignment():
    t = [100.0]
    ticker = Ticker(period=0.02, clock=lambda: t[0])
    assert ticker.align(100.0) == pytest.approx(100.0)
    assert ticker.align(100.001) == pytest.approx(100.02)
    assert ticker.tick_at_or_after(100.04) == 2


async def test_pacers_aligned_to_the_grid_release_on_the_same_ticks():
    ticker = Ticker(period=0.01)
    pacers = [
        PacingClock(period=0.01, clock=ticker.now, sleep=ticker.sleep, align=ticker.align)
        for _ in range(20)
    ]
    for _ in range(5):
        await asyncio.gather(*(p.wait_next() for p in pacers))
    # 20 streams x 5 slots, but only about one timer per tick.
    assert ticker.fired <= 7
    deadlines = {round(p.deadline(), 6) for p in pacers}
    assert len(deadlines) == 1


async def test_one_ticker_per_loop():
    assert shared_ticker() is shared_ticker()
