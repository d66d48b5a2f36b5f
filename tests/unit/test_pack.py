"""``--pack-below``: while the loop serves fewer sessions, new schedules and playout periods keep
to every ``PACK_TICKS``-th tick of the 2.5 ms grid and the shared sockets are read by the fires
while those come ``PACK_TICKS`` ticks apart or sooner; from that many sessions on, schedules
spread over every tick. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.media.ticker import GRID_S, PACK_TICKS, Ticker, coalesce, shared_ticker
from gateway.net import udp_mux
from tests.unit.test_coalesce import record_reads, wait_for


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Receiver:
    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        pass


def every(ticker: Ticker, first_tick: int, ticks: int) -> Callable[[], None]:
    """A callback on ``first_tick`` and every ``ticks`` ticks after (a stream's slots) until the
    returned stop is called."""
    running, nxt = [True], [first_tick]

    def again() -> None:
        if running[0]:
            now_tick = ticker.tick_at_or_after(ticker.now())
            while nxt[0] <= now_tick:
                nxt[0] += ticks
            ticker.call_at(ticker.time_of(nxt[0]), again)

    ticker.call_at(ticker.time_of(first_tick), again)
    return lambda: running.__setitem__(0, False)


async def test_packing_keeps_new_schedules_and_periods_to_every_fourth_tick():
    clock = Clock()
    ticker = Ticker(GRID_S, clock=clock, loop=asyncio.get_running_loop(), pack_below=8)
    assert ticker.packing and ticker.poll_sockets and ticker.poll_window == GRID_S * PACK_TICKS
    for k in range(40):
        t = 100.0 + k * 0.00071
        start = ticker.tick_at_or_after(ticker.align(t))
        assert start % PACK_TICKS == 0
        assert t - 1e-9 <= ticker.time_of(start) < t + PACK_TICKS * GRID_S
        period = ticker.period_tick(t)  # at or after: a repair keeps its time
        assert period % PACK_TICKS == 0
        assert t - 1e-9 <= ticker.time_of(period) < t + PACK_TICKS * GRID_S
    ticker.packing = False  # (a dense loop: every tick)
    t = ticker.time_of(5) + 0.0001
    assert ticker.align(t) == ticker.time_of(6) and ticker.period_tick(t) == 5  # never late
    assert ticker.period_tick(ticker.time_of(5)) == 5  # on a tick: that tick
    plain = Ticker(GRID_S, clock=clock, loop=asyncio.get_running_loop())
    assert not plain.packing and not plain.poll_sockets
    assert plain.align(t) == plain.time_of(6)


async def test_filling_spreads_new_schedules_evenly_over_the_other_ticks():
    clock = Clock()
    ticker = Ticker(GRID_S, clock=clock, loop=asyncio.get_running_loop(), pack_below=8)
    ticker.packing, ticker.filling = False, True  # (past pack_below sessions)
    counts = [0] * 8
    for k in range(8 * 300):  # arrivals at every phase alike
        t = ticker.time_of(k) - 0.0001
        start = ticker.tick_at_or_after(ticker.align(t))
        assert t <= ticker.time_of(start) < t + PACK_TICKS * GRID_S
        counts[start % 8] += 1
    assert counts[0] == counts[4] == 0  # the packed ticks hold their share already
    assert counts[1:4] + counts[5:8] == [400] * 6  # every other tick as many


async def test_packing_stops_at_pack_below_sessions_and_resumes_below(mux):
    ticker = Ticker(GRID_S, loop=asyncio.get_running_loop(), pack_below=2)
    stop = every(ticker, 0, 1)
    try:
        first = mux.attach(Receiver(), "ufrag-1")
        await wait_for(lambda: ticker.fired >= 2)
        assert ticker.packing  # one session, below two
        await wait_for(lambda: mux.polled)  # packing, and a fire every tick: read by fires
        second = mux.attach(Receiver(), "ufrag-2")
        assert udp_mux.sessions(asyncio.get_running_loop()) == 2
        await wait_for(lambda: not ticker.packing)  # decided again at the next fire
        assert ticker.filling  # two sessions, below 2 * PACK_TICKS: the other ticks first
        await wait_for(lambda: not mux.polled)  # dense: read when readable, between fires
        more = [mux.attach(Receiver(), f"ufrag-{k}") for k in range(3, 2 * PACK_TICKS + 1)]
        await wait_for(lambda: not ticker.filling)  # as many as the packed ticks: any tick
        assert not ticker.packing
        for endpoint in more:
            mux.detach(endpoint)
        mux.detach(second)
        await wait_for(lambda: ticker.packing and mux.polled)
        mux.detach(first)
    finally:
        stop()


async def test_sessions_are_counted_again_only_when_one_comes_or_goes(mux, monkeypatch):
    """A fire decides packing from the loop's sessions; it counts them (every shared socket's
    endpoints) only after an endpoint was attached or detached, not at every fire."""
    counted = []
    real = udp_mux.sessions
    monkeypatch.setattr(udp_mux, "sessions", lambda loop: counted.append(1) or real(loop))
    ticker = Ticker(GRID_S, loop=asyncio.get_running_loop(), pack_below=2)
    stop = every(ticker, 0, 1)
    try:
        first = mux.attach(Receiver(), "ufrag-1")
        await wait_for(lambda: ticker.fired >= 2)
        before, fired = len(counted), ticker.fired
        await wait_for(lambda: ticker.fired >= fired + 10)
        assert len(counted) == before == 1 and ticker.packing
        second = mux.attach(Receiver(), "ufrag-2")
        await wait_for(lambda: not ticker.packing)  # counted again: two, not below two
        assert len(counted) == 2
        mux.detach(second)
        await wait_for(lambda: ticker.packing)
        assert len(counted) == 3
        mux.detach(first)
    finally:
        stop()


async def test_two_packed_phases_read_the_socket_at_their_fires(mux):
    """Slots on ticks 0 and 4 of every 8 (fires 10 ms apart): the socket is read by the fires
    only; one phase alone (fires 20 ms apart): read the moment a datagram comes."""
    ticker = Ticker(GRID_S, loop=asyncio.get_running_loop(), pack_below=128)
    reads = record_reads(mux, ticker)
    base = ticker.tick_at_or_after(ticker.now()) + 8
    base -= base % 8
    stops = [every(ticker, base, 8), every(ticker, base + 4, 8)]
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        await wait_for(lambda: mux.polled)
        sent = []
        for _ in range(6):
            sent.append(time.monotonic())
            sender.sendto(b"x" * 40, mux.local_address)
            await asyncio.sleep(0.0033)
        await wait_for(lambda: len(reads) == 6)
        assert all(by_fire for _, by_fire in reads) and mux.stats.polled_reads >= 1
        assert max(r - s for (r, _), s in zip(reads, sent, strict=True)) < 0.5  # (not held)
        stops.pop()()  # phase 4 ends: one fire a frame
        await wait_for(lambda: not mux.polled)
        sender.sendto(b"y" * 40, mux.local_address)
        await wait_for(lambda: len(reads) == 7)
        assert reads[-1][1] is False  # by the selector, at once
    finally:
        for stop in stops:
            stop()
        sender.close()


@pytest.mark.usefixtures("loop_settings")
async def test_the_loops_ticker_packs_on_the_default_grid_only():
    loop = asyncio.get_running_loop()
    coalesce(loop, 0, 128)
    ticker = shared_ticker()
    assert ticker.period == GRID_S and ticker.pack_below == 128 and ticker.poll_sockets
    assert shared_ticker() is ticker
    coalesce(loop, 0.010, 128)  # a coarse grid packs by itself
    coarse = shared_ticker()
    assert coarse.period == 0.010 and coarse.pack_below == 0 and not coarse.packing
    coalesce(loop, 0, 0)
    plain = shared_ticker()
    assert plain.pack_below == 0 and not plain.poll_sockets
    with pytest.raises(ValueError, match="sessions"):
        coalesce(loop, 0, -1)
