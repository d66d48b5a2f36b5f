"""Faults on the send side stay where they happen (real peers, real SRTP, loopback).

Each test here failed before the send interface was shared: one exception in a stream's tick
ended that stream silently; a NACK answer that could not be protected dropped the rest of the
NACK; a failing speaker close skipped the peer connection's close; without a direct socket every
packet became a task in an unbounded set.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import silence_packet
from gateway.nack.rtcp import build_nack_packet
from gateway.webrtc import batch_sender


class FailingOwner:
    cancelled = False

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        raise RuntimeError("an owner's bug")


async def connected(gateway) -> tuple[GatewayClient, object]:
    client = GatewayClient(gateway.url, gateway.http, capture=True)  # the tests read packets
    await client.connect()
    session = next(iter(gateway.registry))
    await asyncio.wait_for(session.webrtc.connected.wait(), 5)
    return client, session


async def test_an_exception_in_the_send_tick_does_not_end_the_stream(start_gateway):
    gateway = await start_gateway()
    client, session = await connected(gateway)
    try:
        await client.capture.wait_packets(5)
        session.webrtc.queue.offer([silence_packet()], FailingOwner(), 0)
        before = len(client.capture.packets)
        await asyncio.wait_for(client.capture.wait_packets(before + 25), 5)  # still streaming
        state = await client.state()
        assert state["send_errors"] == 1 and state["connection_state"] == "connected"
    finally:
        await client.close()


@pytest.mark.parametrize("first_seq", [100, 30_000])
async def test_a_nack_for_seqs_never_sent_is_refused_and_the_stream_still_decrypts(
    start_gateway, first_seq
):
    """Was (a CI failure): the gateway built concealments for seqs from before the stream's
    first packet. First seq 30000: SRTP refused them (``send_failed``). First seq 100: libsrtp
    took seq - 3000 (wrapped) for an index 62,000 ahead and sent it, moving its rollover counter
    -- had that one packet been lost, every later packet would have failed the listener's
    authentication. Such seqs are now refused (``too_old``) before SRTP sees them; the rest of
    the NACK is still answered."""
    gateway = await start_gateway(test_drop_first_tx_percent=20.0, test_drop_seed=3)
    with aiortc_compat.fixed_start_sequence(first_seq):
        client, session = await connected(gateway)
    try:
        await client.capture.wait_packets(40)
        assert client.capture.packets[0].seq % 65536 == first_seq
        have = {p.seq % 65536 for p in client.capture.packets}
        newest = session.webrtc.store.newest_seq
        lost = next(s for s in ((newest - k) & 0xFFFF for k in range(1, 40)) if s not in have)
        ssrc = client.capture.packets[0].ssrc
        seqs = [(newest - 3000) & 0xFFFF, (newest - 3001) & 0xFFFF, lost]
        receiver = client.pc.getTransceivers()[0].receiver
        await aiortc_compat.send_unprotected(receiver.transport, build_nack_packet(1, ssrc, seqs))
        await asyncio.wait_for(client.capture.wait_for_seq(lost), 5)
        after = client.capture.count
        await asyncio.wait_for(client.capture.wait_packets(after + 10), 5)  # still decrypting
        assert min(p.seq for p in client.capture.packets) == first_seq  # nothing from before
        nack = (await client.state())["nack"]
        assert nack["misses"] == 2 and nack["too_old"] == 2 and nack["hits"] == 1
        assert nack["send_failed"] == 0
    finally:
        await client.close()


async def test_a_failing_conversation_close_still_closes_the_peer_connection(gateway):
    client, session = await connected(gateway)

    async def broken() -> None:
        raise RuntimeError("speaker close failed")

    session.conversation.close = broken
    try:
        await session.close("test")
        assert session.webrtc.pc.connectionState == "closed" and session.closed.is_set()
        assert len(gateway.registry) == 0
    finally:
        await client.close(delete=False)


async def test_async_sends_without_a_direct_socket_are_bounded(gateway, monkeypatch):
    client, session = await connected(gateway)
    stuck = asyncio.Event()

    async def slow_send(transport, data: bytes) -> None:
        await stuck.wait()  # a relay that never drains

    try:
        stream = session.webrtc.transmitter
        await client.capture.wait_packets(1)  # (started: what follows is not overwritten)
        stream.settle()  # back from C, if it was handed there: a relay's stream never is
        monkeypatch.setattr(batch_sender.aiortc_compat, "send_unprotected", slow_send)
        stream._direct = None  # as on a TURN relay: no plain UDP socket to send on directly
        stream._compiled = None  # (nor a shared socket's compiled batch)
        target = stream.stats.frames_sent + batch_sender.MAX_PENDING_ASYNC + 10
        # packets come due on the stream's wall clock: wait for that many on the wire's schedule
        await asyncio.sleep((target - stream.stats.frames_sent) * 0.02 + 0.1)
        assert stream.stats.frames_sent >= target
        assert len(stream._pending_sends) <= batch_sender.MAX_PENDING_ASYNC
        assert stream.stats.async_dropped >= 10
    finally:
        stuck.set()
        await client.close()
