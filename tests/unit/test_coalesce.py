"""``--coalesce-ms``: while the shared ticker is busy, the shared UDP sockets are off the loop's
selector and its fires read them (one wake-up a grid tick); when it goes quiet they are read the
moment a datagram comes again. Real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import pytest

from gateway.config import parse_config
from gateway.media.ticker import GRID_S, Ticker, coalesce, shared_ticker
from gateway.net import udp_mux

PERIOD = 0.010


def record_reads(m: udp_mux.UdpMux, ticker: Ticker) -> list[tuple[float, bool]]:
    """(when, read by a fire) for every datagram the socket hands on."""
    reads: list[tuple[float, bool]] = []
    original = m.datagram_received

    def received(data: bytes, addr: tuple[object, ...]) -> None:
        reads.append((time.monotonic(), ticker.firing))
        original(data, addr)

    m.datagram_received = received  # type: ignore[method-assign]
    return reads


def keep_busy(ticker: Ticker) -> Callable[[], None]:
    """A callback on every grid tick (a stream's slots) until the returned stop is called."""
    running = [True]

    def again() -> None:
        if running[0]:  # (the tick after the one nearest now: a fire runs a little late)
            ticker.call_at(ticker.time_of(round((ticker.now() - ticker.time_of(0))
                                                / ticker.period) + 1), again)

    again()
    return lambda: running.__setitem__(0, False)


async def wait_for(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.001)


async def test_a_busy_ticker_reads_the_socket_at_its_fires_and_lets_go_when_quiet(mux):
    loop = asyncio.get_running_loop()
    ticker = Ticker(PERIOD, loop=loop, poll_sockets=True)
    reads = record_reads(mux, ticker)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        stop = keep_busy(ticker)
        await wait_for(lambda: mux.polled)
        assert ticker.polling
        sent: list[float] = []
        for _ in range(5):
            sent.append(time.monotonic())
            sender.sendto(b"x" * 40, mux.local_address)
            await asyncio.sleep(0.0037)  # (scattered over the grid's phases)
        await wait_for(lambda: len(reads) == 5)
        # every one read by a fire, none by the selector; within a tick or so of its sending
        assert all(by_fire for _, by_fire in reads)
        assert mux.stats.polled_reads >= 1 and mux.stats.received == 5
        assert max(r - s for (r, _), s in zip(reads, sent, strict=True)) < 0.5  # (not held)
        stop()
        await wait_for(lambda: not mux.polled)  # the ticker went quiet: back on the selector
        assert not ticker.polling and ticker.waiting == 0
        fires = ticker.fired
        sender.sendto(b"y" * 40, mux.local_address)
        await wait_for(lambda: len(reads) == 6)
        assert reads[-1][1] is False and ticker.fired == fires  # read at once, no fire
    finally:
        sender.close()


async def test_a_ticker_without_polling_leaves_the_socket_on_the_selector(mux):
    ticker = Ticker(PERIOD, loop=asyncio.get_running_loop())
    reads = record_reads(mux, ticker)
    stop = keep_busy(ticker)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        await wait_for(lambda: ticker.fired >= 2)
        sender.sendto(b"x" * 40, mux.local_address)
        await wait_for(lambda: len(reads) == 1)
        assert not mux.polled and reads[0][1] is False and mux.stats.polled_reads == 0
    finally:
        stop()
        sender.close()


async def test_a_socket_bound_while_polled_starts_polled_and_closes_cleanly(mux):
    loop = asyncio.get_running_loop()
    udp_mux.poll_sockets(loop, True)
    assert mux.polled
    second = await udp_mux.UdpMux.bind("127.0.0.1", 0)
    assert second.polled
    second.close()  # (off the selector already: nothing to remove)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sender.sendto(b"x", mux.local_address)
        await asyncio.sleep(0.02)
        assert mux.stats.received == 0  # polled, and no ticker fires: it waits in the socket
        udp_mux.read_polled(loop)
        assert mux.stats.received == 1 and mux.stats.polled_reads == 1
        udp_mux.poll_sockets(loop, False)
        sender.sendto(b"y", mux.local_address)
        await wait_for(lambda: mux.stats.received == 2)  # the selector reads it again
    finally:
        sender.close()


async def test_coalesce_sets_the_loops_grid_and_refuses_a_grid_not_dividing_a_frame(
        loop_settings):
    coalesce(loop_settings, 0.010)
    ticker = shared_ticker()
    assert ticker.period == 0.010 and ticker.poll_sockets
    assert shared_ticker() is ticker
    with pytest.raises(ValueError, match="coalescing grid"):
        coalesce(loop_settings, 0.007)
    coalesce(loop_settings, 0)
    default = shared_ticker()
    assert default.period == GRID_S and not default.poll_sockets


@pytest.mark.parametrize(("field", "default", "flag", "env", "refused", "says"), [
    ("coalesce_ms", 0, ("--coalesce-ms", "10", 10), ("GATEWAY_COALESCE_MS", "2.5", 2.5), "7",
     "one of 0, 2.5, 5, 10, 20"),
    ("pack_below", 128, ("--pack-below", "0", 0), ("GATEWAY_PACK_BELOW", "16", 16), "-3",
     "0 or more"),
])
def test_the_flags_take_their_values_and_refuse_others(capsys, field, default, flag, env,
                                                       refused, says):
    assert getattr(parse_config([], {}), field) == default
    assert getattr(parse_config(list(flag[:2]), {}), field) == flag[2]
    assert getattr(parse_config([], {env[0]: env[1]}), field) == env[2]
    with pytest.raises(SystemExit):
        parse_config([flag[0], refused], {})
    assert says in capsys.readouterr().err
