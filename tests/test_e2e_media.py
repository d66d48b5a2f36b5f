"""End to end over real UDP on 127.0.0.1: offer -> answer -> connected -> speech -> RTP."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from gateway.client.capture import KEEP_ALIVE, decode, utterance_slots, voice_frames
from gateway.media.framer import Framer
from gateway.media.opus_codec import (
    FRAME_SAMPLES,
    RTP_TICKS_PER_FRAME,
    SAMPLE_RATE,
    EncoderSettings,
    OpusFrameEncoder,
)
from tests.conftest import tone_voices
from tests.helpers import dominant_frequency


async def speak_and_collect(client, voice: str):
    result = await client.say("A tone please.", voice=voice)
    state = await client.wait_utterance(result.utterance["id"])
    assert state["state"] == "done", state
    slots = utterance_slots(client.capture.ordered(), state["first_seq"], state["frames_sent"],
                            after=result.said_at)
    return state, slots


def frames_of(slots):
    """The slots carrying the tone's frames, by their own sequence numbers. A slot whose frame
    was not encoded in time (the encoder's threads starved of CPU, seen beside three other
    tests) carries the keep-alive silence: skipped, a tone never encodes to it."""
    return [p for p in slots if p.payload != KEEP_ALIVE]


async def test_payloads_are_byte_identical_to_one_encoding(gateway, connect):
    client = await connect()
    state, slots = await speak_and_collect(client, "tone")
    speech = frames_of(slots)
    # An independent encoder with the same settings over the same PCM gives the same bytes:
    # the gateway encoded each frame once and RTP carried it unchanged.
    pcm = tone_voices().get("tone").pcm()
    framer = Framer(FRAME_SAMPLES)
    frames = framer.push(pcm) + framer.flush()
    encoder = OpusFrameEncoder(EncoderSettings())
    expected = [encoder.encode(f) for f in frames]
    assert state["frames_sent"] == len(expected) == 50
    assert [p.payload for p in speech] == expected
    # And what the server's frame store holds for those sequence numbers is the same bytes.
    session = next(iter(gateway.registry))
    for p in speech[-10:]:
        assert session.webrtc.store.lookup(p.seq % 65536).payload == p.payload


@pytest.mark.serial  # packet spacing is real-time pacing
async def test_timestamps_step_960_and_packets_are_paced(connect):
    client = await connect()
    await client.capture.wait_packets(3)  # the idle stream is flowing before any speech
    _, slots = await speak_and_collect(client, "tone")
    speech = frames_of(slots)
    packets = client.capture.ordered()
    steps = {(b.timestamp - a.timestamp) % 2**32 for a, b in itertools.pairwise(packets)}
    assert steps == {RTP_TICKS_PER_FRAME}
    assert all(b.seq == a.seq + 1 for a, b in itertools.pairwise(packets))
    assert len({p.ssrc for p in packets}) == 1
    # Silence keeps the stream alive before and after the utterance.
    silence = KEEP_ALIVE
    assert packets[0].payload == silence and packets[-1].seq >= speech[-1].seq
    await client.capture.wait_for_seq((speech[-1].seq + 2) % 65536)
    assert client.capture.ordered()[-1].payload == silence
    arrivals = [p.arrival for p in speech]
    gaps = np.diff(arrivals) * 1000
    assert 19.0 <= statistics.median(gaps) <= 21.0
    assert sum(g < 5.0 for g in gaps) <= 1, f"burst: {sorted(gaps)[:5]}"
    # Arrival follows the RTP timestamp schedule: no drift, no accumulated lateness.
    media_time = np.array([(p.timestamp - speech[0].timestamp) % 2**32 for p in speech]) / 48000
    offset = np.array(arrivals) - arrivals[0] - media_time
    assert abs(offset[-1] - offset[1]) < 0.010, "pacing drifted over one second"
    assert np.percentile(np.abs(offset[1:] - np.median(offset[1:])), 95) < 0.005


async def test_440hz_tone_arrives_at_440hz(connect):
    client = await connect()
    _, slots = await speak_and_collect(client, "tone48k")  # resampled 48 kHz -> 24 kHz
    pcm = decode(voice_frames(slots)).pcm[FRAME_SAMPLES * 2 : -FRAME_SAMPLES * 2]
    assert abs(dominant_frequency(pcm, SAMPLE_RATE) - 440.0) <= 1.0
    assert np.sqrt(np.mean(pcm.astype(float) ** 2)) > 3000  # a loud tone, not silence


async def test_speech_queues_behind_and_interrupt_replaces(gateway, connect):
    client = await connect()
    long = await client.say("long", voice="long")
    queued = await client.say("after", voice="tone")
    assert queued.utterance["state"] == "queued"
    state = await client.state()
    assert state["utterances"]["pending"] >= 1
    silence = KEEP_ALIVE
    await client.capture.wait_until(  # the long utterance is being heard
        lambda: sum(p.payload != silence for p in client.capture.packets) >= 5
    )
    barge = await client.say("now", voice="tone", interrupt=True)
    final = await client.wait_utterance(barge.utterance["id"])
    assert final["state"] == "done"
    long_state = await client.wait_utterance(long.utterance["id"])
    queued_state = await client.wait_utterance(queued.utterance["id"])
    assert long_state["state"] == "interrupted" and long_state["frames_sent"] < 1500
    assert queued_state["state"] == "interrupted" and queued_state["frames_sent"] == 0
    # The barge-in's frames directly follow the cut speech: no 30 s of queued audio first.
    assert final["first_seq"] is not None
    gap = (final["first_seq"] - long_state["last_seq"]) % 65536
    assert gap <= 3, gap
    session = gateway.registry.get(client.session_url.rsplit("/", 1)[-1])
    assert session.state()["utterances"]["interrupted"] == 2
