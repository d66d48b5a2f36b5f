"""Fixtures the shared ticker's socket tests share (test_coalesce.py, test_pack.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.media import ticker as ticker_module
from gateway.media.ticker import coalesce
from gateway.net import udp_mux


@pytest.fixture
async def mux() -> AsyncIterator[udp_mux.UdpMux]:
    """A shared socket on 127.0.0.1, back on the selector and closed after."""
    m = await udp_mux.UdpMux.bind("127.0.0.1", 0)
    yield m
    udp_mux.poll_sockets(asyncio.get_running_loop(), False)
    m.close()


@pytest.fixture
async def loop_settings() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """The running loop; its ``coalesce`` settings and shared ticker forgotten after."""
    loop = asyncio.get_running_loop()
    yield loop
    coalesce(loop, 0)
    ticker_module._TICKERS.pop(loop, None)
