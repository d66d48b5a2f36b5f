"""--idle-packets dtx and --early-first-frame (batch send path), end to end on loopback; the
idle stream sent from C (``gw_dtx_set``), taken back for the early first frame.

Between utterances an idle stream sends Opus DTX: 10 silent frames after speech (libopus's own
200 ms hangover: the decoder goes quiet), then a 1-byte packet (the silent frame's TOC, no
frame) and every 20th slot after it (400 ms), its RTP timestamp still on the 20 ms grid.
A new utterance's first frame goes out at once (not in the next slot), with the marker bit,
and a timestamp that follows real time: the stream's schedule restarts there and the
RTP clock moves with it, so a receiver's jitter buffer sees neither an early packet nor one that
fell behind.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import pytest

from gateway.tts.base import PcmChunk
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer
from gateway.webrtc.batch_sender import DTX_EVERY, DTX_HANGOVER, EARLY_MIN_WAIT_S

TICKS_PER_MS = 48
FRAME_TICKS = 960


class SlowTone(ToneSynthesizer):
    """A tone whose first PCM comes 40 ms after the request, as a TTS's would: the request is
    made as a DTX packet arrives, and the first frame then reaches the stream two slots later,
    after an empty one (a frame following the DTX packet's own slot takes the next slot)."""

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        await asyncio.sleep(0.040)  # the voice's time to first PCM
        async for chunk in super().stream(text):
            yield chunk


def utterance_packets(packets: list, state: dict) -> list:
    """The packets from the utterance's first to its last sequence number (16-bit serial)."""
    first, last = state["first_seq"], state["last_seq"]
    span = (last - first) & 0xFFFF
    return sorted((p for p in packets if ((p.seq % 65536) - first) & 0xFFFF <= span),
                  key=lambda p: p.seq)


@pytest.fixture
async def dtx_gateway(start_gateway):
    voices = VoiceRegistry([
        SlowTone(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000),
        SlowTone(name="blip", frequency=440.0, seconds=0.1, sample_rate=24_000),
    ])
    return await start_gateway(voices, idle_packets="dtx", early_first_frame=True)


async def test_idle_dtx_then_a_talkspurt_sent_at_once(dtx_gateway):
    from gateway.client.peer import GatewayClient

    client = GatewayClient(dtx_gateway.url, dtx_gateway.http, capture=True)
    await client.connect()
    try:
        # the hangover's silent frames, then DTX packets every 400 ms
        await client.capture.wait_packets(DTX_HANGOVER + 3)
        hangover = client.capture.packets[:DTX_HANGOVER]
        assert all(len(p.payload) > 1 for p in hangover)
        idle = list(client.capture.packets[DTX_HANGOVER:])
        assert all(len(p.payload) == 1 for p in idle), [len(p.payload) for p in idle]
        assert not any(p.marker for p in idle)
        for a, b in itertools.pairwise(idle):
            assert b.timestamp - a.timestamp == DTX_EVERY * FRAME_TICKS, (a, b)
            assert 0.3 < b.arrival - a.arrival < 0.6, (a, b)
        stream = next(iter(dtx_gateway.registry)).webrtc.transmitter
        assert stream.in_c and stream.handovers >= 1  # C sends the idle stream's DTX

        result = await client.say("a tone", voice="tone")
        state = await client.wait_utterance(result.utterance["id"])
        assert state["state"] == "done" and state["frames_sent"] == 50, state
        # queued -> on the wire: at once, not in the next 20 ms slot -- early, or kept its slot
        # by design when that slot was due within EARLY_MIN_WAIT_S (or the slot before carried
        # a DTX packet); how often each happens is the next test's (3 of 8 early at least)
        early = (await client.state())["early_first_frames"]
        assert early <= 1, early
        assert state["slot_wait_ms"] <= (EARLY_MIN_WAIT_S + 0.0025) * 1000, (early, state)
        packets = list(client.capture.packets)
        speech = utterance_packets(packets, state)
        assert len(speech) >= 50, (len(speech), state)
        first = speech[0]
        assert first.marker and len(first.payload) > 1, first
        # a marker inside the utterance only after an underrun (a busy machine): the hangover's
        # silent frames or a DTX packet before it
        silent = hangover[0].payload
        by_seq = {p.seq: p for p in packets}
        for p in speech[1:]:
            if p.marker:
                before = by_seq[p.seq - 1].payload
                assert len(before) == 1 or before == silent, (p, by_seq[p.seq - 1])
        # then the talkspurt runs on a 20 ms grid of its own (restarted after an underrun)
        for a, b in itertools.pairwise(speech):
            assert b.timestamp - a.timestamp == FRAME_TICKS or b.marker, (a, b)
        # and the stream goes back to DTX
        after = [p for p in packets if p.seq > speech[-1].seq]
        await client.capture.wait_packets(len(speech) + len(idle) + len(hangover)
                                          + DTX_HANGOVER + 2)
        after = [p for p in client.capture.packets if p.seq > speech[-1].seq]
        assert [len(p.payload) == 1 for p in after[: DTX_HANGOVER + 2]] \
            == [False] * DTX_HANGOVER + [True] * 2, after
        session = await client.state()
        assert session["early_first_frames"] >= 1, session
    finally:
        await client.close()


@pytest.mark.serial  # real-time pacing: the first frames sent early, counted
async def test_talkspurt_timestamps_keep_following_real_time(dtx_gateway):
    """Each restart moves the RTP clock with the schedule: over many talkspurts the first
    packets' timestamps stay in step with their send times. (Were the restarted slot to keep
    its old timestamp, every talkspurt would fall 0-17.5 ms further behind real time, and the
    receiver would see every packet after it as that much late.)"""
    from gateway.client.peer import GatewayClient

    client = GatewayClient(dtx_gateway.url, dtx_gateway.http, capture=True)
    await client.connect()
    try:
        await client.capture.wait_packets(DTX_HANGOVER + 1)  # idle: DTX
        firsts = []
        for i in range(8):  # (new texts: a phrase-cache hit would come at once)
            result = await client.say(f"short tone {i}", voice="blip")
            state = await client.wait_utterance(result.utterance["id"])
            session = await client.state()
            firsts.append((state, session))
            # the hangover and DTX again (nothing sent in the slot before the next one)
            await client.capture.wait_packets(client.capture.count + DTX_HANGOVER + 1)
        # the gateway's own send times (Unix ms) against the timestamps of those packets
        base_state = firsts[0][0]
        base_ms = base_state["timeline_unix_ms"]["first_sent"]
        base_ts = base_state["first_timestamp"]
        drift = [((s["first_timestamp"] - base_ts) % 2**32) / TICKS_PER_MS
                 - (s["timeline_unix_ms"]["first_sent"] - base_ms) for s, _ in firsts]
        print("\ntimestamp - send time, ms:", [round(d, 1) for d in drift])
        # Not the same for all: a first frame that kept its slot (below) is off by its wait.
        # Were the clock left behind at each restart, 8 talkspurts would spread over ~60 ms.
        assert max(drift) - min(drift) < 10.0, drift
        waits = [s["slot_wait_ms"] for s, _ in firsts]
        # early: ~0; kept its slot: at most EARLY_MIN_WAIT_S and the 2.5 ms tick it fires on
        assert all(w <= (EARLY_MIN_WAIT_S + 0.0025) * 1000 for w in waits), waits
        # Most first frames went early (each restart moved the clock). Not every one: a frame
        # that arrives within EARLY_MIN_WAIT_S of its slot, or after a slot that carried a DTX
        # packet, keeps its slot by design (about one in six here; the per-utterance count
        # this asserted before failed a run in a few). 3 of 8 fails about once in a thousand.
        early = (await client.state())["early_first_frames"]
        assert early >= 3, (early, firsts[-1][1])
    finally:
        await client.close()
