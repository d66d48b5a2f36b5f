"""The shared ticker: one timer releases every stream due on a tick."""

import asyncio

import pytest

from gateway.media.ticker import Ticker, shared_ticker
from gateway.webrtc.pacer import PacingClock


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


async def test_a_tick_runs_its_sends_then_the_end_of_tick_hooks_then_the_deferred_work():
    """Was: a receive path's playout period (decode, VAD) ran among the tick's sends and the
    shared socket's flush waited for the next loop iteration, behind everything else ready."""
    ticker = Ticker(period=0.005)
    order: list[str] = []
    done = asyncio.get_running_loop().create_future()
    target = ticker.align(ticker.now() + 0.006)
    ticker.call_after_sends(target, lambda: order.append("playout"))
    ticker.call_at(target, lambda: order.append("send 1"))
    ticker.after_each_tick(lambda: order.append("flush"))
    ticker.after_each_tick(order.clear)  # a hook added twice runs once
    ticker.after_each_tick(order.clear)
    ticker.call_at(target, lambda: order.append("send 2"))
    ticker.call_after_sends(target, lambda: done.set_result(None))
    assert ticker.waiting == 4
    await done
    assert order == ["playout"]  # the hooks ran (clear) after the sends, the playout after them
    assert ticker.fired == 1 and ticker.released == 4 and ticker.waiting == 0


async def test_a_failing_callback_or_hook_does_not_stop_the_tick():
    ticker = Ticker(period=0.005)
    ran: list[str] = []
    done = asyncio.get_running_loop().create_future()
    target = ticker.align(ticker.now() + 0.006)

    def boom() -> None:
        raise RuntimeError("a stream's bug")

    ticker.call_at(target, boom)
    ticker.after_each_tick(boom)
    ticker.call_at(target, lambda: ran.append("send"))
    ticker.call_after_sends(target, lambda: done.set_result(None))
    await done
    assert ran == ["send"]


async def test_a_callback_may_add_to_the_tick_that_runs_it():
    """Every table lets go of a tick before its callbacks run: one added to the same tick from
    inside it (a deferred callback of that tick pending) is run, not lost."""
    ticker = Ticker(period=0.005)
    done = asyncio.get_running_loop().create_future()
    target = ticker.align(ticker.now() + 0.006)
    ticker.call_after_sends(target, lambda: None)
    ticker.call_at(target, lambda: ticker.call_at(target, lambda: done.set_result(None)))
    await asyncio.wait_for(done, 1)
    assert ticker.waiting == 0


async def test_tick_stamp_is_shared_within_a_fire_and_cleared_between_fires():
    """The batch senders' send stamp: the first stream of a fire sets it, the others of that
    fire see it, the next fire (and anything outside a fire) starts without it."""
    ticker = Ticker(period=0.005)
    seen: list[tuple[bool, object]] = []

    def sender(stamp: tuple[int, int, bytes]) -> None:
        seen.append((ticker.firing, ticker.tick_stamp))
        if ticker.tick_stamp is None and ticker.firing:
            ticker.tick_stamp = stamp

    loop = asyncio.get_running_loop()
    done = [loop.create_future(), loop.create_future()]

    def last_of(fire: int, stamp: tuple[int, int, bytes]) -> None:
        sender(stamp)
        done[fire].set_result(None)

    first = ticker.align(ticker.now() + 0.006)
    ticker.call_at(first, lambda: sender((1, 1, b"\x00\x00\x01")))
    ticker.call_at(first, lambda: last_of(0, (2, 2, b"\x00\x00\x02")))
    await asyncio.wait_for(done[0], 1)
    # armed only once the first fire is over: a late loop cannot run both ticks in one fire
    # (it did on a busy CI machine, with the second tick armed 5 ms after the first)
    ticker.call_at(ticker.align(ticker.now() + 0.006), lambda: last_of(1, (3, 3, b"\x00\x00\x03")))
    await asyncio.wait_for(done[1], 1)
    assert ticker.fired == 2
    assert seen == [(True, None), (True, (1, 1, b"\x00\x00\x01")), (True, None)]
    assert ticker.tick_stamp is None and not ticker.firing
