"""Issue 23, timeouts on every socket: a slowloris (30 sockets sending headers a byte at a
time), a body that stops, and idle keep-alive connections are closed; a body that keeps
sending stays open; a per-address cap refuses connections past it with a JSON 503; /healthz
answers throughout."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

import pytest

from gateway.api.timeouts import LINGER_S, check_aiohttp_internals
from tests.abuse_probe import LoopStall


def test_the_aiohttp_internals_the_guard_uses_are_there():
    assert check_aiohttp_internals() == []


async def _open(gateway) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(gateway.url)
    return await asyncio.open_connection(url.hostname, url.port)


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the server sent before closing; fails if it is still open after ``seconds``."""
    return await asyncio.wait_for(reader.read(), seconds)


async def _healthz_ms(gateway) -> float:
    started = time.monotonic()
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        assert r.status == 200
    return (time.monotonic() - started) * 1000


async def test_slowloris_is_cut_at_the_header_timeout(start_gateway):
    gateway = await start_gateway(header_timeout_s=1.0, keepalive_timeout_s=30.0)
    clients = [await _open(gateway) for _ in range(30)]
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000

    async def drip(writer: asyncio.StreamWriter) -> None:
        for byte in request:  # a byte every 100 ms: never done within the timeout
            writer.write(bytes([byte]))
            await asyncio.sleep(0.1)

    drips = [asyncio.create_task(drip(w)) for _, w in clients]
    try:
        async with LoopStall() as stall:
            answers = await asyncio.gather(*(_closed_within(r, 5.0) for r, _ in clients))
            healthz = await _healthz_ms(gateway)
    finally:
        for task in drips:
            task.cancel()
        for _, writer in clients:
            writer.close()
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408")
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "header_timeout"
    assert stall.worst_s < 1.0 and healthz < 1000


async def test_a_refused_client_still_sending_reads_its_whole_408(start_gateway):
    """The 408 is not lost to a TCP reset when the client sends after it arrived: the gateway
    half-closes and drains instead of closing (a closed socket answers the bytes with a reset,
    and the reset fails the client's read of the 408 it has not consumed yet)."""
    gateway = await start_gateway(header_timeout_s=0.5, keepalive_timeout_s=30.0)
    reader, writer = await _open(gateway)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        await asyncio.sleep(1.0)  # the 408 is in our receive buffer, unread
        for _ in range(3):  # late bytes: a closed socket answers with a reset, and the next
            writer.write(b"X-More: 1\r\n")  # write fails and fails the reader too
            await asyncio.sleep(0.2)
        answer = await _closed_within(reader, 5.0)
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "header_timeout"


async def test_a_refused_client_that_never_closes_is_closed_after_the_linger(start_gateway):
    gateway = await start_gateway(header_timeout_s=0.3, keepalive_timeout_s=30.0)
    reader, writer = await _open(gateway)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        answer = await _closed_within(reader, 2.0)  # the 408, then the gateway's half-close
        assert answer.startswith(b"HTTP/1.1 408")
        eof_at = time.monotonic()
        with pytest.raises(ConnectionError):  # keeps sending: reset once the linger is over
            while time.monotonic() - eof_at < 2 * LINGER_S:
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.05)
    finally:
        writer.close()


async def test_an_idle_keepalive_connection_is_closed(start_gateway):
    gateway = await start_gateway(keepalive_timeout_s=0.5)
    reader, writer = await _open(gateway)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    first = await reader.readuntil(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200")
    silent_reader, silent = await _open(gateway)  # never sends a byte
    try:
        await _closed_within(reader, 3.0)
        await _closed_within(silent_reader, 3.0)
    finally:
        writer.close()
        silent.close()


async def test_a_body_that_stops_is_a_408_and_one_that_keeps_sending_is_not(start_gateway):
    gateway = await start_gateway(body_idle_timeout_s=0.5, header_timeout_s=5.0)
    body = json.dumps({"input": "hello there", "voice": "tone"}).encode()
    head = (b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    reader, writer = await _open(gateway)
    writer.write(head + body[:5])  # ... and nothing more
    answer = await _closed_within(reader, 3.0)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
    # the same body a byte every 0.2 s (5 s in all, ten times the idle timeout): accepted
    reader, writer = await _open(gateway)
    writer.write(head)
    for i in range(0, len(body), 2):
        writer.write(body[i:i + 2])
        await asyncio.sleep(0.2)
    status = await asyncio.wait_for(reader.readline(), 5.0)
    writer.close()
    assert status.startswith(b"HTTP/1.1 200"), status


async def test_connections_past_the_per_address_cap_get_a_503(start_gateway):
    gateway = await start_gateway(max_connections_per_ip=20)
    held = [await _open(gateway) for _ in range(20)]
    try:
        await asyncio.sleep(0.1)
        reader, writer = await _open(gateway)
        answer = await _closed_within(reader, 2.0)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 503")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == (
            "too_many_connections")
    finally:
        for _, w in held:
            w.close()
    await asyncio.sleep(0.1)
    assert await _healthz_ms(gateway) < 1000  # freed: new connections are served again


async def test_x_forwarded_for_is_believed_from_trusted_proxies_only(start_gateway):
    body = {"input": "hi", "voice": "tone", "response_format": "pcm"}

    async def statuses(gateway, forwarded_for: list[str]) -> list[int]:
        out = []
        for client in forwarded_for:
            async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body,
                                         headers={"X-Forwarded-For": client}) as r:
                await r.read()
                out.append(r.status)
        return out

    # behind a trusted proxy (here 127.0.0.1): each forwarded client has its own bucket
    trusting = await start_gateway(rate_limit_speech=1.0, trusted_proxies=("127.0.0.1",))
    assert await statuses(trusting, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == [200] * 3
    assert await statuses(trusting, ["10.0.0.1"] * 2) == [200, 429]
    # from anyone else the header is ignored: the peer's one bucket
    plain = await start_gateway(rate_limit_speech=1.0)
    assert await statuses(plain, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == [200, 200, 429]
