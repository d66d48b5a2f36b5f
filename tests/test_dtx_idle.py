"""--idle-packets dtx and --early-first-frame (batch send path), end to end on loopback.

Between utterances an idle stream sends Opus DTX: a 1-byte packet (the silent frame's TOC, no
frame) on the first idle slot and every 20th after it (400 ms), its RTP timestamp still on the
20 ms grid. A new utterance's first frame goes out at once (on the next 2.5 ms tick, not in the
next slot), with the marker bit, and a timestamp that follows real time from the last DTX
packet: the stream's schedule restarts there and the RTP clock moves with it, so a receiver's
jitter buffer sees neither an early packet nor one that fell behind.
"""

from __future__ import annotations

import itertools

import pytest

from gateway.media.batch_sender import DTX_EVERY
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

TICKS_PER_MS = 48
FRAME_TICKS = 960


@pytest.fixture
async def dtx_gateway(start_gateway):
    voices = VoiceRegistry([
        ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000),
        ToneSynthesizer(name="blip", frequency=440.0, seconds=0.1, sample_rate=24_000),
    ])
    return await start_gateway(voices, idle_packets="dtx", early_first_frame=True)


async def test_idle_dtx_then_a_talkspurt_sent_at_once(dtx_gateway):
    from gateway.client.peer import GatewayClient

    client = GatewayClient(dtx_gateway.url, dtx_gateway.http, capture=True)
    await client.connect()
    try:
        await client.capture.wait_packets(3)  # the first DTX packet at once, then every 400 ms
        idle = list(client.capture.packets)
        assert all(len(p.payload) == 1 for p in idle), [len(p.payload) for p in idle]
        assert not any(p.marker for p in idle)
        for a, b in itertools.pairwise(idle):
            assert b.timestamp - a.timestamp == DTX_EVERY * FRAME_TICKS, (a, b)
            assert 0.3 < b.arrival - a.arrival < 0.6, (a, b)

        result = await client.say("a tone", voice="tone")
        state = await client.wait_utterance(result.utterance["id"])
        assert state["state"] == "done" and state["frames_sent"] == 50, state
        # queued -> on the wire: at once, not in the next 20 ms slot
        assert state["slot_wait_ms"] <= 3.0, state
        packets = client.capture.packets
        speech = [p for p in packets if p.seq >= state["first_seq"] and len(p.payload) > 1]
        first = speech[0]
        assert first.seq == state["first_seq"] and first.marker, first
        # a marker inside the utterance only after an underrun (a DTX packet: a busy machine)
        by_seq = {p.seq: p for p in packets}
        for p in speech[1:]:
            if p.marker:
                assert len(by_seq[p.seq - 1].payload) == 1, (p, by_seq[p.seq - 1])
        # then the talkspurt runs on a 20 ms grid of its own (restarted after an underrun)
        for a, b in itertools.pairwise(speech):
            assert b.timestamp - a.timestamp == FRAME_TICKS or b.marker, (a, b)
        # and the stream goes back to DTX
        await client.capture.wait_packets(len(packets) + 2)
        after = client.capture.packets[len(speech) + len(idle):]
        assert after and all(len(p.payload) == 1 for p in after[-2:]), after
        session = await client.state()
        assert session["early_first_frames"] >= 1, session
    finally:
        await client.close()


async def test_talkspurt_timestamps_keep_following_real_time(dtx_gateway):
    """Each restart moves the RTP clock with the schedule: over many talkspurts the first
    packets' timestamps stay in step with their send times. (Were the restarted slot to keep
    its old timestamp, every talkspurt would fall 0-17.5 ms further behind real time, and the
    receiver would see every packet after it as that much late.)"""
    from gateway.client.peer import GatewayClient

    client = GatewayClient(dtx_gateway.url, dtx_gateway.http, capture=True)
    await client.connect()
    try:
        await client.capture.wait_packets(1)
        firsts = []
        for _ in range(8):
            result = await client.say("a short tone", voice="blip")
            state = await client.wait_utterance(result.utterance["id"])
            session = await client.state()
            assert session["early_first_frames"] >= len(firsts) + 1, session
            firsts.append((state, session))
            await client.capture.wait_packets(client.capture.count + 1)  # DTX again
        # the gateway's own send times (Unix ms) against the timestamps of those packets
        base_state = firsts[0][0]
        base_ms = base_state["timeline_unix_ms"]["first_sent"]
        base_ts = base_state["first_timestamp"]
        drift = [((s["first_timestamp"] - base_ts) % 2**32) / TICKS_PER_MS
                 - (s["timeline_unix_ms"]["first_sent"] - base_ms) for s, _ in firsts]
        print("\ntimestamp - send time, ms:", [round(d, 1) for d in drift])
        assert max(abs(d) for d in drift) < 6.0, drift
        waits = [s["slot_wait_ms"] for s, _ in firsts]
        assert all(w <= 3.0 for w in waits), waits
    finally:
        await client.close()
