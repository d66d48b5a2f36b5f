"""The gateway answers RTCP NACKs from its 5 s frame store (real peers, real SRTCP, loopback)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.media.framer import Framer
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.nack.rtcp import build_nack_packet
from tests.conftest import tone_voices


async def nack(client: GatewayClient, seqs: list[int]) -> None:
    ssrc = client.capture.packets[0].ssrc
    receiver = client.pc.getTransceivers()[0].receiver
    await aiortc_compat.send_unprotected(receiver.transport, build_nack_packet(1, ssrc, seqs))


async def gateway_state(gateway, client) -> dict:
    async with gateway.http.get(client.session_url) as r:
        return await r.json()


def tone_payloads() -> list[bytes]:
    framer = Framer(FRAME_SAMPLES)
    pcm = tone_voices().get("tone").pcm()
    encoder = OpusFrameEncoder(EncoderSettings())
    return [encoder.encode(f) for f in framer.push(pcm) + framer.flush()]


async def test_lost_first_transmissions_are_resent_byte_identical(start_gateway):
    gateway = await start_gateway(
        test_drop_first_tx_percent=10.0, test_drop_seed=7
    )
    client = GatewayClient(gateway.url, gateway.http, capture=True, red=False)
    await client.connect()
    try:
        said = await client.say("tone", voice="tone")
        state = await client.wait_utterance(said.utterance["id"])
        first = next(p.seq for p in client.capture.ordered() if p.seq % 65536 == state["first_seq"])
        speech = range(first, first + state["frames_sent"])
        have = {p.seq for p in client.capture.packets}
        lost = [s for s in speech if s not in have]
        assert len(lost) >= 2, "the drop option should have lost some first transmissions"
        await nack(client, [s % 65536 for s in lost])
        for s in lost:
            await asyncio.wait_for(client.capture.wait_for_seq(s % 65536), 5)
        got = {p.seq: p.payload for p in client.capture.packets if p.seq in speech}
        expected = tone_payloads()
        assert [got[s] for s in speech] == expected  # every frame, resent ones included
        counters = (await gateway_state(gateway, client))["nack"]
        assert counters["hits"] == len(lost) and counters["misses"] == 0
        assert counters["nacks_received"] == 1 and counters["test_dropped"] >= len(lost)
    finally:
        await client.close()


def lost_between(client: GatewayClient, first: int, last: int) -> list[int]:
    """Unwrapped seqs in [first, last] the client never received (dropped by the test option)."""
    have = {p.seq for p in client.capture.packets}
    return [s for s in range(first, last + 1) if s not in have]


# Note: a receiver's SRTP replay protection discards a second copy of a packet it already has,
# so every NACK below asks for a packet that really was lost (the gateway's drop option).


async def test_repeated_nack_is_rate_limited(start_gateway):
    gateway = await start_gateway(test_drop_first_tx_percent=20.0, test_drop_seed=3)
    client = GatewayClient(gateway.url, gateway.http, capture=True, red=False)
    await client.connect()
    try:
        await client.capture.wait_packets(30)
        ordered = client.capture.ordered()
        target = lost_between(client, ordered[0].seq, ordered[-1].seq)[0]
        before = len(client.capture.packets)
        # Two NACK packets for the same seq in one compound datagram: the second falls inside
        # the 40 ms back-off that follows the first resend.
        twice = build_nack_packet(1, ordered[0].ssrc, [target % 65536]) * 2
        receiver = client.pc.getTransceivers()[0].receiver
        await aiortc_compat.send_unprotected(receiver.transport, twice)
        await asyncio.wait_for(client.capture.wait_arrival(target, before), 5)
        counters = (await gateway_state(gateway, client))["nack"]
        assert counters["hits"] == 1 and counters["rate_limited"] == 1
        assert counters["nacks_received"] == 2
    finally:
        await client.close()


@pytest.mark.timeout(60)
async def test_nack_older_than_five_seconds_gets_a_concealment_packet(start_gateway):
    gateway = await start_gateway(test_drop_first_tx_percent=20.0, test_drop_seed=5)
    client = GatewayClient(gateway.url, gateway.http, capture=True, red=False)
    await client.connect()
    try:
        await client.capture.wait_packets(20)
        ordered = client.capture.ordered()
        old = lost_between(client, ordered[0].seq, ordered[-1].seq)[0]
        # The store holds 250 packets (5 s): wait until that lost packet has left it.
        await asyncio.wait_for(client.capture.wait_for_seq((old + 260) % 65536), 15)
        before = len(client.capture.packets)
        await nack(client, [old % 65536])
        repeat = await asyncio.wait_for(client.capture.wait_arrival(old, before), 5)
        # A lone TOC byte (code 0, zero-length frame): the decoder conceals that frame.
        assert len(repeat.payload) == 1 and repeat.payload[0] & 0x03 == 0
        neighbour = next(p for p in client.capture.ordered() if p.seq == old + 1)
        assert (neighbour.timestamp - repeat.timestamp) % 2**32 == 960
        counters = (await gateway_state(gateway, client))["nack"]
        assert counters["misses"] == 1 and counters["concealments_sent"] == 1
        assert counters["hits"] == 0
    finally:
        await client.close()


async def test_speech_cut_by_barge_in_is_not_resent(start_gateway):
    gateway = await start_gateway(test_drop_first_tx_percent=20.0, test_drop_seed=11)
    client = GatewayClient(gateway.url, gateway.http, capture=True, red=False)
    await client.connect()
    try:
        long = await client.say("long", voice="long")
        await asyncio.wait_for(_speech_started(client), 5)
        assert await client.interrupt() == 1
        state = await client.wait_utterance(long.utterance["id"])
        assert state["state"] == "interrupted"
        first = next(p.seq for p in client.capture.ordered() if p.seq % 65536 == state["first_seq"])
        lost = lost_between(client, first, first + state["frames_sent"] - 1)
        assert lost, "20 % drop over the cut speech should lose something"
        before = len(client.capture.packets)
        await nack(client, [lost[0] % 65536])
        repeat = await asyncio.wait_for(client.capture.wait_arrival(lost[0], before), 5)
        assert len(repeat.payload) == 1  # concealment, not the cut speech
        counters = (await gateway_state(gateway, client))["nack"]
        assert counters["cancelled"] == 1 and counters["hits"] == 0
    finally:
        await client.close()


async def test_malformed_rtcp_is_counted_and_the_stream_flows(gateway, connect):
    client = await connect()
    receiver = client.pc.getTransceivers()[0].receiver
    await client.capture.wait_packets(1)
    ssrc = client.capture.packets[0].ssrc
    good = build_nack_packet(1, ssrc, [client.capture.packets[-1].seq % 65536])
    bad = bytearray(good)
    bad[3] += 5  # length field past the datagram
    await aiortc_compat.send_unprotected(receiver.transport, bytes(bad))
    said = await client.say("still", voice="tone")
    state = await client.wait_utterance(said.utterance["id"])
    assert state["state"] == "done"
    counters = (await gateway_state(gateway, client))["nack"]
    assert counters["malformed"] == 1


async def _speech_started(client: GatewayClient) -> None:
    """Until the listener has heard speech (a packet that is not the keep-alive silence)."""
    silence = client.capture.packets[0].payload if client.capture.packets else None
    await client.capture.wait_until(
        lambda: sum(p.payload != silence for p in client.capture.packets) >= 10
    )
