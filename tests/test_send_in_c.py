"""A stream sent from C (issue 28): a plain stream on the compiled path hands its slots to
``gw_run_parked`` (``BatchStream._to_c``) -- the keep-alive silence, and the speech frames fed
to it ahead (up to ``sendpath.FED_SLOTS``) -- and is taken back for its sender report, a
reader of its counters, or its close; RED is sent from C too. A real aiortc client over loopback
sees one continuous stream across every hand-over (no seq skipped or repeated, the timestamp
960 a packet, every packet decrypting), the same speech as the tick sends, nothing of an
utterance after its interrupt returned, and a NACK for a packet C sent answered byte-identical
to the one the tick would have built."""

from __future__ import annotations

import asyncio
import copy
from itertools import pairwise

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.nack.rtcp import build_nack_packet
from gateway.net import sendpath
from gateway.webrtc.batch_sender import BatchStream
from gateway.webrtc.in_c import HeldInC


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


async def test_the_stream_goes_to_c_and_stays_one_stream(gateway):
    if sendpath.load() is None:
        raise AssertionError(f"the compiled send path is not built: {sendpath.failure()}")
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(10)
        await asyncio.wait_for(_until(lambda: stream.in_c), 2)
        parks = stream.handovers
        start = client.capture.count
        await asyncio.wait_for(client.capture.wait_packets(start + 25), 3)  # C sends them
        result = await client.say("hi", voice="tone")  # fed to C ahead: it stays there
        await client.wait_utterance(result.utterance["id"])
        assert stream.in_c and stream.handovers == parks  # (a sender report stays in C too)
        await asyncio.sleep(0.3)
        state = await client.state()  # read while in C: taken back, the counters up to date
        packets = client.capture.ordered()
        assert_continuous(packets)
        assert state["packets_sent"] >= len(packets)
        assert state["packets_sent"] - len(packets) < 10  # (in flight at most)
        assert state["speech_frames_sent"] > 0 and state["send_errors"] == 0
        assert state["pacer"]["rebases"] == 0
        await asyncio.wait_for(_until(lambda: stream.handovers > parks), 1)  # and back to C
    finally:
        await client.close()
    await asyncio.wait_for(session.closed.wait(), 5)
    assert not stream.in_c  # its close took it back: C sends nothing more for it


async def test_a_nack_for_silence_sent_from_c_is_answered_byte_identical(gateway):
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    store = session.webrtc.store
    try:
        await asyncio.wait_for(_until(lambda: stream.in_c), 3)
        await client.capture.wait_packets(client.capture.count + 5)
        newest = store.newest_seq
        assert stream.in_c and newest is not None
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


async def test_a_stream_with_test_loss_keeps_its_silence_on_the_tick(start_gateway):
    gateway = await start_gateway(test_drop_first_tx_percent=5.0, test_drop_seed=1)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(30)
        assert not stream.in_c and stream.handovers == 0
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
    gateway = await start_gateway(send_in_c=False)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(30)
        assert not stream.in_c and stream.handovers == 0
        assert_continuous(client.capture.ordered())
    finally:
        await client.close()


def speech(packets, silence: bytes) -> list[bytes]:
    return [p.payload for p in packets if p.payload != silence]


async def test_speech_from_c_is_the_speech_the_tick_sends(start_gateway):
    heard = {}
    for in_c in (True, False):
        gateway = await start_gateway(send_in_c=in_c)
        client, session = await connected(gateway)
        stream = session.webrtc.transmitter
        try:
            seen_in_c = []
            await client.capture.wait_packets(5)
            result = await client.say("one two three four", voice="tone")
            while True:
                seen_in_c.append(stream.in_c)
                state = (await client.state())
                if state["speech_frames_sent"] >= 20 or len(seen_in_c) > 500:
                    break
                await asyncio.sleep(0.005)
            done = await client.wait_utterance(result.utterance["id"])
            packets = client.capture.ordered()
            assert_continuous(packets)
            heard[in_c] = speech(packets, stream.silence)
            assert len(heard[in_c]) == done["frames_sent"] == done["frames_encoded"] > 20
            assert any(seen_in_c) == in_c  # (reading the state takes it back for a slot)
        finally:
            await client.close()
    assert heard[True] == heard[False]


async def test_an_interrupt_takes_back_the_frame_fed_to_c(gateway):
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(5)
        result = await client.say("a long sentence to be cut short " * 4, voice="tone")
        await client.capture.wait_until(lambda: len(speech(client.capture.packets,
                                                           stream.silence)) >= 10)
        assert stream.in_c
        assert await client.interrupt() == 1
        stopped = asyncio.get_running_loop().time()
        done = await client.wait_utterance(result.utterance["id"])
        await asyncio.sleep(0.2)
        assert done["state"] == "interrupted"
        packets = client.capture.ordered()
        assert_continuous(packets)
        said = speech(packets, stream.silence)
        assert len(said) == done["frames_sent"] < done["frames_encoded"]
        late = [p for p in packets if p.payload != stream.silence and p.arrival > stopped + 0.03]
        assert not late, "speech sent after the interrupt returned"
        assert (await client.state())["send_errors"] == 0
    finally:
        await client.close()


async def test_a_reader_of_the_played_position_counts_what_c_sent(gateway):
    """C's sends are recorded once a run (its fed frames down to ``FED_LOW``); a reader of how
    far the listener has played -- word events, a cut, what was heard -- records them first,
    so an utterance's frames are the ones C sent by then, not the last visit's count."""
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await client.capture.wait_packets(5)
        result = await client.say("a long sentence counted as it goes " * 6, voice="tone")
        utterance = session.speaker.get(result.utterance["id"])
        assert utterance is not None

        def heard() -> int:
            return len(speech(client.capture.packets, stream.silence))

        await client.capture.wait_until(lambda: heard() >= 10)
        for _ in range(12):  # at different points between C's reports
            assert stream.in_c
            captured = heard()
            session.conversation.played_ms(utterance)
            assert captured <= utterance.primary.frames <= heard() + 5
            await asyncio.sleep(0.03)
    finally:
        await client.close()


async def test_a_moved_ice_pair_takes_the_stream_back_at_once(gateway, monkeypatch):
    """C sends on the pair it was handed with; a new nominated pair (an ICE restart) takes
    the stream back the moment aioice sets it (``aiortc_compat.NominatedPairs``) -- not at
    the periodic path check (turned off here) --, and the stream goes on over the new pair."""
    monkeypatch.setattr(BatchStream, "_on_report", lambda self: None)
    monkeypatch.setattr(HeldInC, "check_some", lambda self: None)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await asyncio.wait_for(_until(lambda: stream.in_c), 3)
        assert stream._compiled.still_valid()
        transport = session.webrtc.pc.getTransceivers()[0].sender.transport
        nominated = transport.transport._connection._nominated  # (aioice's)
        nominated[1] = copy.copy(nominated[1])  # the same path, another pair object
        assert not stream.in_c  # taken back at once
        assert not stream._compiled.still_valid()
        before = client.capture.count
        await asyncio.wait_for(_until(lambda: stream._compiled.still_valid()), 0.3)
        await asyncio.wait_for(_until(lambda: stream.in_c), 0.3)  # handed over again
        await asyncio.wait_for(client.capture.wait_packets(before + 20), 2)
        assert_continuous(client.capture.ordered())
    finally:
        await client.close()


async def test_a_high_bitrate_stream_is_sent_from_c_too(start_gateway):
    """C reads fed frames where they lie (no copy into a slot of its own): a 128 kbit/s
    stream's 20 ms frames (~320 bytes, up to twice that) go from C as well, as one stream."""
    gateway = await start_gateway(bitrate=128_000)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await asyncio.wait_for(_until(lambda: stream.in_c), 2)
        result = await client.say("a longer sentence to send", voice="tone")
        await client.wait_utterance(result.utterance["id"])
        state = await client.state()
        assert stream.in_c_allowed and stream.handovers > 0
        assert state["speech_frames_sent"] > 0 and state["send_errors"] == 0
        assert_continuous(client.capture.ordered())
    finally:
        await client.close()


async def test_loss_that_turns_red_on_keeps_the_stream_in_c_and_its_packets_red(
        gateway, monkeypatch):
    """A NACK that turns adaptive RED on leaves the stream in C (``BatchStream.red_changed``):
    from then on C sends every packet as RED -- silence and speech --, each carrying the two
    packets before it byte for byte, and a NACK for one of them is answered with the packet as
    it was sent. (Sender reports, which would take it back for a moment, are off here.)"""
    from gateway.rtp import red
    from tests.test_red import RED_PT, listen, wait_for

    monkeypatch.setattr(BatchStream, "_on_report", lambda self: None)
    packets: list = []
    pc, location = await listen(gateway, packets)
    session = next(iter(gateway.registry))
    stream = session.webrtc.transmitter
    try:
        await asyncio.wait_for(_until(lambda: stream.in_c), 3)
        await wait_for(packets, lambda: len(packets) >= 20)
        parks = stream.handovers
        assert {p.payload_type for p in packets} != {RED_PT}
        receiver = pc.getTransceivers()[0].receiver
        nack = build_nack_packet(1, packets[0].ssrc, [packets[-1].sequence_number])
        await aiortc_compat.send_unprotected(receiver.transport, nack)
        await wait_for(packets, lambda: packets[-1].payload_type == RED_PT)
        first_red = len(packets) - 1
        async with gateway.http.post(f"{location}/speech",
                                     json={"text": "hi", "voice": "tone"}) as r:
            assert r.status == 202
        await wait_for(packets, lambda: len(packets) >= first_red + 60)
        assert stream.in_c and stream.handovers == parks  # never back on the tick
        sent = sorted(packets[first_red:first_red + 60], key=lambda p: p.sequence_number)
        assert {p.payload_type for p in sent} == {RED_PT}
        primaries = {p.timestamp: red.decode(p.payload)[-1].data for p in sent}
        assert len(set(primaries.values())) > 10  # speech, not only silence
        checked = 0
        for p in sent[2:]:
            blocks = red.decode(p.payload)
            assert [b.timestamp_offset for b in blocks] == [1920, 960, 0]
            for block in blocks[:-1]:
                assert block.data == primaries[(p.timestamp - block.timestamp_offset)
                                               & 0xFFFFFFFF]
                checked += 1
        assert checked >= 100
        # a NACK for a RED packet C sent: resent as it was (the store rebuilds it; the client's
        # SRTP refuses a packet it already has, so what is resent is read from the store)
        asked = sent[-10]
        stored = session.webrtc.store.lookup(asked.sequence_number)
        assert stored is not None and stored.red
        assert (stored.packet[1] & 0x7F, stored.timestamp, stored.payload) == (
            RED_PT, asked.timestamp, asked.payload)
        before = session.webrtc.retransmitter.counters.hits
        again = build_nack_packet(1, asked.ssrc, [asked.sequence_number])
        await aiortc_compat.send_unprotected(receiver.transport, again)
        await asyncio.wait_for(
            _until(lambda: session.webrtc.retransmitter.counters.hits > before), 2)
        state = await (await gateway.http.get(location)).json()
        assert state["red"]["red_packets"] >= 60 and state["red"]["activations"] == 1
    finally:
        await pc.close()


async def test_a_tick_sent_from_c_is_flushed_by_the_tick_alone(gateway, monkeypatch):
    """The end-of-tick hook stages C's packets and flushes them itself: no ``call_soon``
    flush behind it (it found nothing to send, a loop iteration of its own each tick)."""
    from gateway.net import udp_mux

    empty: list[bool] = []  # per flush: nothing was pending for that socket
    original = udp_mux.UdpMux.flush

    def flush(self: udp_mux.UdpMux) -> None:
        empty.append(self not in udp_mux._PENDING)
        original(self)

    monkeypatch.setattr(udp_mux.UdpMux, "flush", flush)
    client, session = await connected(gateway)
    stream = session.webrtc.transmitter
    try:
        await asyncio.wait_for(_until(lambda: stream.in_c), 2)
        await asyncio.sleep(0.1)
        empty.clear()
        start = client.capture.count
        await asyncio.wait_for(client.capture.wait_packets(start + 25), 3)
        assert stream.in_c
        assert len(empty) >= 20
        assert sum(empty) <= 3  # (an RTCP packet's own backstop, at most; it was one a tick)
    finally:
        await client.close()


def test_the_path_checks_come_in_batches_and_reach_every_stream_each_second():
    """``HeldInC``'s backstop path check: every 100 ms a tenth of the streams, after the tick's
    packets are flushed -- each stream checked once a second, in ten warm runs, not a few
    cold checks at the end of every 2.5 ms tick; a stream whose path is gone goes back."""
    from gateway.media.ticker import GRID_S
    from gateway.webrtc import in_c

    class Clock:
        now = 100.0

    class Ticker:
        tick_stamp = (0, 0)

        def clock(self) -> float:
            return Clock.now

        def call_at(self, t: float, callback: object) -> None:
            pass

    class Batch:
        parked = True

        def run_parked(self, *args: object) -> tuple[int, float, None]:
            return 0, Clock.now + 0.0025, None

    checked: list[tuple[float, int]] = []

    class Stream:
        def __init__(self, handle: int, valid: bool = True) -> None:
            self.handle, self.valid, self.back = handle, valid, False

        def path_still_valid(self) -> bool:
            checked.append((Clock.now, self.handle))
            return self.valid

        def back_to_tick(self) -> None:
            self.back = True

    ticker = Ticker()
    held = HeldInC(ticker)  # type: ignore[arg-type]
    streams = [Stream(handle, valid=handle != 7) for handle in range(1000)]
    batch = Batch()
    for stream in streams:
        held.add(stream.handle, stream, (batch, None, None))  # type: ignore[arg-type]
    for _ in range(400):  # one second of 2.5 ms ticks
        held.end_of_tick()
        Clock.now += GRID_S  # (the ticks of the shared grid)
    times = sorted({t for t, _ in checked})
    assert len(times) == 10  # ten batches a second
    assert all(b - a >= in_c.CHECK_GRAIN_S - 1e-9 for a, b in pairwise(times))
    assert sorted(handle for _, handle in checked) == list(range(1000))  # each once
    assert streams[7].back and not any(s.back for s in streams if s.handle != 7)
