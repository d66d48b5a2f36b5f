"""Keep-alive silence sent from C (issue 28): between utterances a stream on the compiled path
hands its slots to ``gw_run_parked`` (``BatchStream._park``), and takes them back for the next
frame, its sender report, a reader of its counters, or its close. A real aiortc client over
loopback sees one continuous stream across every hand-over: no seq skipped or repeated, the
timestamp 960 a packet, every packet decrypting; a NACK for a packet C sent is answered
byte-identical to the one the tick would have built."""

from __future__ import annotations

import asyncio
from itertools import pairwise

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.nack.rtcp import build_nack_packet
from gateway.net import sendpath


async def connected(gateway) -> tuple[GatewayClient, object]:
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    session = next(iter(gateway.registry))
    await asyncio.wait_for(session.webrtc.connected.wait(), 5)
    return client, session


def assert_continuous(packets) -> None:
    seqs = [p.seq for p in packets]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a seq skipped or repeated"
    steps = {(b.timestamp - a.timestamp) & 0xFFFFFFFF for a, b in pairwise(packets)}
    assert steps == {960}


async def test_silence_goes_to_c_and_the_stream_stays_one_stream(gateway):
    if sendpath.load() is None:
        raise AssertionError(f"the compiled send path is not built: {sendpath.failure()}")
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(10)
        await asyncio.wait_for(_until(lambda: stream.parked), 2)
        parks = stream.parks
        start = client.capture.count
        await asyncio.wait_for(client.capture.wait_packets(start + 25), 3)  # C sends them
        assert stream.parked or stream.parks > parks  # (a sender report may take it back)
        result = await client.say("hi", voice="tone")  # a frame: taken back, sent in its slot
        await client.wait_utterance(result.utterance["id"])
        await asyncio.wait_for(_until(lambda: stream.parked), 2)  # parked again after it
        await asyncio.sleep(0.3)
        state = await client.state()  # read while parked: the counters are brought up to date
        packets = client.capture.ordered()
        assert_continuous(packets)
        assert state["packets_sent"] >= len(packets)
        assert state["packets_sent"] - len(packets) < 10  # (in flight at most)
        assert state["speech_frames_sent"] > 0 and state["send_errors"] == 0
        assert state["pacer"]["rebases"] == 0
        assert stream.parks > parks
    finally:
        await client.close()
    await asyncio.wait_for(session.closed.wait(), 5)
    assert not stream.parked  # its close took it back: C sends nothing more for it


async def test_a_nack_for_silence_sent_from_c_is_answered_byte_identical(gateway):
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    store = session.webrtc.store
    try:
        await asyncio.wait_for(_until(lambda: stream.parked), 3)
        await client.capture.wait_packets(client.capture.count + 5)
        newest = store.newest_seq
        assert stream.parked and newest is not None
        kept = store.lookup(newest)
        assert kept is not None and kept.frame is None
        assert kept.payload == stream.silence
        # the packet the tick would have built for that seq, timestamp and send time
        sent = next(p for p in client.capture.packets if p.seq % 65536 == newest)
        assert kept.timestamp == sent.timestamp and kept.payload == sent.payload
        header, packet = store.header, kept.packet
        assert packet[1] == header.second_byte  # plain Opus, as C sent it
        at = header.ast_at
        ast = packet[at:at + 3] if at >= 0 else b""
        assert packet == header.build(newest, kept.timestamp, ast, stream.silence)
        before = (await client.state())["nack"]["hits"]
        receiver = client.pc.getTransceivers()[0].receiver
        ssrc = client.capture.packets[0].ssrc
        await aiortc_compat.send_unprotected(receiver.transport,
                                             build_nack_packet(1, ssrc, [newest]))
        await asyncio.wait_for(_until_async(
            lambda: client.state(), lambda s: s["nack"]["hits"] > before), 3)
    finally:
        await client.close()


async def test_a_stream_with_red_or_test_loss_keeps_its_silence_on_the_tick(start_gateway):
    gateway = await start_gateway(test_drop_first_tx_percent=5.0, test_drop_seed=1)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(30)
        assert not stream.parked and stream.parks == 0
    finally:
        await client.close()


async def _until(condition) -> None:
    """Poll ``condition`` (state of the gateway's own loop: no event to wait on)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError


async def _until_async(read, condition) -> None:
    for _ in range(500):
        if condition(await read()):
            return
        await asyncio.sleep(0.02)
    raise TimeoutError


async def test_with_the_option_off_every_slot_goes_from_the_tick(start_gateway):
    gateway = await start_gateway(silence_in_c=False)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(30)
        assert not stream.parked and stream.parks == 0
        assert_continuous(client.capture.ordered())
    finally:
        await client.close()
