"""A tick due when a shared socket has been read dry runs in that loop iteration
(``Ticker.fire_if_due`` from ``udp_mux.after_reads``), not on a wake-up of its own."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.media.ticker import FIRE_SLACK_S, Ticker, may_run_early, shared_ticker
from gateway.net import udp_mux


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


async def test_a_tick_within_the_fires_slack_runs_now_and_not_again() -> None:
    clock = Clock()
    ticker = Ticker(period=0.0025, clock=clock, loop=asyncio.get_running_loop())
    ran: list[str] = []
    at = ticker.time_of(4)
    ticker.call_at(at, lambda: ran.append("send"))
    ticker.call_after_sends(at, lambda: ran.append("period"))
    ticker.after_each_tick(lambda: ran.append("hook"))
    clock.t = at - 0.002  # too early for a fire: nothing
    ticker.fire_if_due()
    assert ran == [] and ticker.ran_early == 0
    clock.t = at - FIRE_SLACK_S + 1e-5  # what a timer fire now would run: the whole tick
    ticker.fire_if_due()
    assert ran == ["send", "hook", "period"] and ticker.ran_early == 1
    assert ticker.waiting == 0 and ticker._armed is None  # (nothing left: the timer is gone)
    await asyncio.sleep(0.01)
    assert ticker.fired == 0 and ran == ["send", "hook", "period"]


async def test_a_playout_only_tick_runs_up_to_a_grid_tick_early_others_do_not() -> None:
    clock = Clock()
    ticker = Ticker(period=0.0025, clock=clock, loop=asyncio.get_running_loop())
    ran: list[str] = []
    periods, sends, words = ticker.time_of(4), ticker.time_of(8), ticker.time_of(12)
    ticker.call_after_sends(periods, may_run_early(lambda: ran.append("period")))
    ticker.call_at(sends, lambda: ran.append("send"))
    ticker.call_after_sends(sends, may_run_early(lambda: ran.append("period with sends")))
    ticker.call_after_sends(words, may_run_early(lambda: ran.append("period with words")))
    ticker.call_after_sends(words, lambda: ran.append("words"))  # (not marked: on time)
    clock.t = periods - 0.0026  # more than a grid tick ahead
    ticker.fire_if_due()
    assert ran == []
    clock.t = periods - 0.0024  # within one: the playout period runs (no sends, no waiters)
    ticker.fire_if_due()
    assert ran == ["period"] and ticker.ran_early == 1
    assert ticker._armed is not None and ticker._armed[0] == 8  # the timer for what is left
    clock.t = sends - 0.0024  # a tick with sends waits for its time (or the fire's slack)
    ticker.fire_if_due()
    assert ran == ["period"]
    clock.t = sends
    ticker._fire()  # (its timer)
    assert ran == ["period", "send", "period with sends"]
    clock.t = words - 0.0024  # so does one with a callback not marked
    ticker.fire_if_due()
    assert ran == ["period", "send", "period with sends"]
    ticker._disarm()


async def test_the_shared_socket_calls_its_loops_hook_once_read_dry() -> None:
    loop = asyncio.get_running_loop()
    ticker = shared_ticker()
    calls: list[int] = []

    class Hook:
        def __call__(self) -> None:
            calls.append(1)

    hook = Hook()
    udp_mux.after_reads(loop, hook.__call__)
    mux = await udp_mux.UdpMux.bind("127.0.0.1")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _ in range(3):
            sender.sendto(b"\x80" + bytes(20), mux.local_address)
        for _ in range(100):
            if mux.stats.received == 3 and calls:
                break
            await asyncio.sleep(0.005)
        assert mux.stats.received == 3
        assert 1 <= len(calls) <= 3  # once a burst read dry, not once a datagram
    finally:
        sender.close()
        mux.close()
        udp_mux.after_reads(loop, ticker.fire_if_due)


async def test_the_shared_ticker_is_its_loops_hook() -> None:
    ticker = shared_ticker()
    ref = udp_mux._AfterReads.by_loop[asyncio.get_running_loop()]
    assert ref() == ticker.fire_if_due


async def test_a_playout_period_is_marked_to_run_early_and_runs_from_a_read() -> None:
    from gateway.receive.playout import PlayoutClock

    clock = Clock()
    ticker = Ticker(period=0.0025, clock=clock, loop=asyncio.get_running_loop())
    played: list[float] = []
    playout = PlayoutClock(played.append, period_s=0.020, cover_s=0.2, ticker=ticker)
    playout.start(ticker.time_of(8))
    clock.t = ticker.time_of(8) - 0.002  # a datagram read 2 ms before the period's tick
    ticker.fire_if_due()
    assert played == [clock.t] and ticker.ran_early == 1
    assert playout.next_at == pytest.approx(ticker.time_of(16))  # the schedule as it was
    playout.stop()
    ticker._disarm()
