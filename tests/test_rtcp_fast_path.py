"""The SRTCP fast path (issue 28, aiortc_compat/rtcp_fast.py): a connected session's RTCP is
taken straight from the shared UDP socket's read loop. Real aiortc peers over real UDP on
127.0.0.1: a listener's receiver reports reach the gateway's sender (aiortc's statistics and the
NACK responder's) and its NACKs are answered, both by the fast path; a replayed SRTCP datagram
is dropped; a handler that waits keeps the session's RTCP in order behind it, bounded; turned
off, aiortc's path does the same; closing the session removes the callback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway import aiortc_compat
from gateway.aiortc_compat import rtcp_fast
from gateway.aiortc_compat._common import _MUX_ENDPOINTS, _ice_connection
from gateway.client.peer import GatewayClient
from gateway.nack.rtcp import build_nack_packet

pytestmark = pytest.mark.timeout(60)

CLIENT_SSRC = 0x5EED0001


@pytest.fixture
async def listening(start_gateway: Any) -> Any:
    """``await listening(**gateway_options)``: a gateway, a listening client (its packets kept)
    and its session, connected; the clients closed after the test."""
    clients: list[GatewayClient] = []

    async def start(**options: Any) -> tuple[Any, Any, Any]:
        gateway = await start_gateway(**options)
        client = GatewayClient(gateway.url, gateway.http, capture=True)
        clients.append(client)
        await client.connect()
        session = next(iter(gateway.registry))
        await asyncio.wait_for(session.webrtc.connected.wait(), 5)
        return gateway, client, session

    yield start
    for client in clients:
        await client.close()


async def until(condition: Any, timeout: float = 5.0) -> None:
    async def wait() -> None:
        while not condition():  # noqa: ASYNC110 (counters of the gateway's: no event to wait on)
            await asyncio.sleep(0.02)

    await asyncio.wait_for(wait(), timeout)


def client_transport(client: Any) -> Any:
    return client.transceiver.receiver.transport


def endpoint_of(session: Any) -> Any:
    transport = session.webrtc._transceiver.sender.transport
    (endpoint,) = vars(_ice_connection(transport))[_MUX_ENDPOINTS]
    return endpoint


def app_packet(n: int) -> bytes:
    """An RTCP APP packet (RFC 3550 §6.7) numbered ``n`` in its data: aiortc ignores it."""
    return (bytes([0x80, 204, 0, 3]) + CLIENT_SSRC.to_bytes(4, "big") + b"TEST"
            + n.to_bytes(4, "big"))


async def test_receiver_reports_take_the_fast_path(listening):
    gateway, client, session = await listening()
    leg = session.webrtc
    assert leg.rtcp_fast is not None and leg.rtcp_fast_refusal is None
    assert leg.rx_fast is None  # a listener: no uplink, no RTP fast path
    result = await client.say("hello there", voice="tone")
    await client.wait_utterance(result.utterance["id"])
    # aiortc's receiver reports, about one a second, each handled from the read loop
    await until(lambda: leg.rtcp_fast.packets >= 2 and leg.retransmitter.counters.reports >= 1)
    sender = leg._transceiver.sender
    stats = await sender.getStats()
    assert any(s.type == "remote-inbound-rtp" for s in stats.values())  # aiortc's handler ran
    transport = next(s for s in stats.values() if s.type == "transport")
    assert transport.packetsReceived >= leg.rtcp_fast.packets  # aiortc's counters kept
    assert leg.state()["rtcp_fast"]["packets"] == leg.rtcp_fast.packets
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        assert (await r.json())["udp_mux"]["fast_received"] >= leg.rtcp_fast.packets


async def test_a_nack_is_answered_from_the_read_loop(listening):
    _, client, session = await listening()
    leg = session.webrtc
    await until(lambda: len(client.capture.packets) >= 20)
    media_ssrc = aiortc_compat.sender_ssrc(leg._transceiver.sender)
    seq = client.capture.packets[-5].seq & 0xFFFF
    handled = leg.rtcp_fast.packets
    nack = build_nack_packet(CLIENT_SSRC, media_ssrc, [seq])
    await aiortc_compat.send_unprotected(client_transport(client), nack)
    await until(lambda: leg.retransmitter.counters.nacks_received >= 1)
    assert leg.rtcp_fast.packets >= handled + 1
    # resent from the store (the client's SRTP drops it as a replay: it was not lost)
    counters = leg.retransmitter.counters
    assert counters.hits == 1 and counters.send_failed == 0


async def test_a_replayed_srtcp_datagram_is_dropped(listening):
    _, client, session = await listening()
    endpoint = endpoint_of(session)
    fast = endpoint.fast_receive
    raw: list[bytes] = []

    def keep(data: bytes) -> bool:
        if len(data) > 1 and 192 <= data[1] <= 208:
            raw.append(data)
        return fast(data)

    endpoint.fast_receive = keep
    await aiortc_compat.send_unprotected(client_transport(client), app_packet(1))
    await until(lambda: bool(raw))
    stats = session.webrtc.rtcp_fast
    dropped, handled = stats.srtp_dropped, stats.packets
    (source,) = endpoint.addresses
    endpoint.mux.datagram_received(raw[0], source)  # the same SRTCP datagram again
    assert stats.srtp_dropped == dropped + 1 and stats.packets == handled


async def test_short_and_foreign_datagrams_go_aiortcs_way(listening):
    """An empty or one-octet datagram from the peer's address, STUN, DTLS or RTP: not the
    SRTCP path's (aiortc's path decides); the session lives on."""
    _, client, session = await listening()
    endpoint = endpoint_of(session)
    fast = endpoint.fast_receive
    assert isinstance(fast, rtcp_fast.FastRtcp)
    for data in (b"", b"\x80", b"\x00\x01" + bytes(18), b"\x16\xfe\xfd" + bytes(10),
                 bytes([0x80, 111]) + bytes(20)):
        assert fast(data) is False, data
    (source,) = endpoint.addresses
    stats = endpoint.mux.stats
    empty = stats.dropped_empty
    # an empty datagram is dropped at the socket: aiortc's receive task would end on it
    # (``data[0]``), and the session with it
    endpoint.mux.datagram_received(b"", source)
    endpoint.mux.datagram_received(b"\x80", source)
    assert stats.dropped_empty == empty + 1
    before = len(client.capture.packets)
    await until(lambda: len(client.capture.packets) >= before + 10)  # the session goes on
    assert session.webrtc._transceiver.sender.transport.state == "connected"


async def test_a_waiting_handler_keeps_the_order_and_the_backlog_is_bounded(
        listening, monkeypatch):
    monkeypatch.setattr(rtcp_fast, "MAX_BACKLOG", 3)
    _, client, session = await listening()
    transport = session.webrtc._transceiver.sender.transport
    release = asyncio.get_running_loop().create_future()
    seen: list[int] = []

    async def handle(data: bytes) -> None:  # records our APP packets; the first one waits
        if data[1] == 204 and data[8:12] == b"TEST":
            n = int.from_bytes(data[12:16], "big")
            seen.append(n)
            if n == 1:
                await release

    transport._handle_rtcp_data = handle
    stats = session.webrtc.rtcp_fast
    sending = client_transport(client)
    for n in range(1, 7):  # 1 waits, 2-4 wait behind it, 5 and 6 are past the bound
        await aiortc_compat.send_unprotected(sending, app_packet(n))
    await until(lambda: stats.backlog_dropped >= 2)
    assert seen == [1] and stats.suspended == 1
    release.set_result(None)
    await until(lambda: seen == [1, 2, 3, 4])
    await aiortc_compat.send_unprotected(sending, app_packet(7))  # handled at once again
    await until(lambda: seen == [1, 2, 3, 4, 7])
    assert stats.suspended == 1 and stats.failed == 0
    del transport._handle_rtcp_data


async def test_closing_cancels_a_waiting_handler(listening):
    _, client, session = await listening()
    transport = session.webrtc._transceiver.sender.transport
    outcome: list[str] = []
    waiting = asyncio.Event()

    async def handle(data: bytes) -> None:
        if data[1] == 204:
            waiting.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise

    transport._handle_rtcp_data = handle
    connection = _ice_connection(transport)
    await aiortc_compat.send_unprotected(client_transport(client), app_packet(1))
    await asyncio.wait_for(waiting.wait(), 5)
    assert isinstance(vars(connection)[rtcp_fast.FAST_RTCP], rtcp_fast.FastRtcp)
    await client.close()
    await asyncio.wait_for(session.closed.wait(), 5)
    await until(lambda: outcome == ["cancelled"])
    assert rtcp_fast.FAST_RTCP not in vars(connection)
    assert endpoint_of_closed(connection) == []


def endpoint_of_closed(connection: Any) -> list[Any]:
    return list(vars(connection).get(_MUX_ENDPOINTS, ()))


async def test_a_failing_handler_is_counted_and_the_session_lives(listening):
    _, client, session = await listening()
    transport = session.webrtc._transceiver.sender.transport

    async def handle(data: bytes) -> None:
        raise RuntimeError("a broken handler")

    transport._handle_rtcp_data = handle
    stats = session.webrtc.rtcp_fast
    await aiortc_compat.send_unprotected(client_transport(client), app_packet(1))
    await until(lambda: stats.failed >= 1)
    del transport._handle_rtcp_data
    before = len(client.capture.packets)
    await until(lambda: len(client.capture.packets) >= before + 10)
    assert transport.state == "connected"


async def test_with_the_fast_path_off_aiortc_handles_the_same(listening):
    gateway, client, session = await listening(rtcp_fast_path=False)
    leg = session.webrtc
    assert leg.rtcp_fast is None and leg.rtcp_fast_refusal == "off (--no-rtcp-fast-path)"
    assert endpoint_of(session).fast_receive is None
    await until(lambda: len(client.capture.packets) >= 20)
    media_ssrc = aiortc_compat.sender_ssrc(leg._transceiver.sender)
    seq = client.capture.packets[-5].seq & 0xFFFF
    nack = build_nack_packet(CLIENT_SSRC, media_ssrc, [seq])
    await aiortc_compat.send_unprotected(client_transport(client), nack)
    await until(lambda: leg.retransmitter.counters.hits == 1)
    await until(lambda: leg.retransmitter.counters.reports >= 1)
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        assert (await r.json())["udp_mux"]["fast_received"] == 0
