"""The OpenAI-compatible transcription backend against the stand-in server (loopback, real HTTP),
and the stand-in's own protocol behaviour."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import numpy as np
import pytest

from gateway.listen.asr import RecognitionError, Recognizer
from gateway.listen.audio import wav_bytes
from gateway.listen.openai_asr import OpenAITranscriber, OpenAITranscriptionConfig
from gateway.testing.transcription_server import StandInConfig, TranscriptionStandIn


@pytest.fixture
async def standin():
    async with TranscriptionStandIn(StandInConfig(text=" What time is it? ")) as server:
        yield server


def tone(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)


def transcriber(server: TranscriptionStandIn, **kw) -> OpenAITranscriber:
    return OpenAITranscriber(OpenAITranscriptionConfig(base_url=server.url, **kw))


async def test_transcribes_through_the_wire_format(standin):
    rec = transcriber(standin, model="Systran/faster-whisper-tiny.en", language="en",
                      prompt="weather")
    assert isinstance(rec, Recognizer)
    audio = tone(1.5)
    try:
        transcript = await rec.transcribe(audio, final=True)
    finally:
        await rec.close()
    assert transcript is not None and transcript.text == "What time is it?"
    assert transcript.final and transcript.audio_seconds == pytest.approx(1.5)
    (req,) = standin.requests
    assert req.outcome == "completed"
    assert req.headers["Content-Type"].startswith("multipart/form-data; boundary=")
    assert req.fields == {"model": "Systran/faster-whisper-tiny.en", "response_format": "json",
                          "language": "en", "prompt": "weather"}
    assert req.file is not None and req.file.filename == "audio.wav"
    assert req.file.headers["content-type"] == "audio/wav"
    assert req.file.data == wav_bytes(audio)
    assert req.sample_rate == 16000 and np.array_equal(req.audio, audio)


async def test_float_audio_is_sent_as_16_bit(standin):
    rec = transcriber(standin)
    await rec.transcribe(np.full(8000, 0.5, dtype=np.float32), final=True)
    await rec.close()
    assert standin.requests[0].audio is not None
    assert set(standin.requests[0].audio.tolist()) == {16384}


@pytest.mark.parametrize(("fault", "message"), [
    ("http500", "HTTP 500: The server had an error"),
    ("http503", "HTTP 503: The engine is currently overloaded"),
    ("bad_json", "sent no JSON"),
    ("no_text", "without a text field"),
    ("drop", "cannot reach"),
])
async def test_server_failures_raise_recognition_errors(standin, fault, message):
    standin.faults = fault
    rec = transcriber(standin)
    with pytest.raises(RecognitionError, match=message):
        await rec.transcribe(tone(0.5), final=True)
    await rec.close()


async def test_a_hanging_server_times_out(standin):
    standin.faults = "hang"
    rec = transcriber(standin, timeout=0.3, connect_timeout=0.2)
    with pytest.raises(RecognitionError, match=r"did not answer within 0\.3 s"):
        await rec.transcribe(tone(0.5), final=True)
    await rec.close()


async def test_an_unreachable_server_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rec = OpenAITranscriber(OpenAITranscriptionConfig(base_url=f"http://127.0.0.1:{port}/v1"))
    with pytest.raises(RecognitionError, match="cannot reach"):
        await rec.transcribe(tone(0.2), final=True)
    await rec.close()


async def test_a_missing_api_key_variable_is_an_error(standin, monkeypatch):
    monkeypatch.delenv("NO_SUCH_ASR_KEY", raising=False)
    rec = transcriber(standin, api_key_env="NO_SUCH_ASR_KEY")
    with pytest.raises(RecognitionError, match="NO_SUCH_ASR_KEY"):
        await rec.transcribe(tone(0.2), final=True)
    monkeypatch.setenv("NO_SUCH_ASR_KEY", "t0ken")
    await rec.transcribe(tone(0.2), final=True)
    await rec.close()
    assert standin.requests[0].headers["Authorization"] == "Bearer t0ken"


async def test_partials_are_skipped_while_one_is_in_flight_finals_never(standin):
    standin.config.delay_ms = 150
    rec = transcriber(standin)
    first = asyncio.create_task(rec.transcribe(tone(0.5), final=False))
    await asyncio.sleep(0.02)
    assert await rec.transcribe(tone(0.6), final=False) is None
    final = await rec.transcribe(tone(0.7), final=True)
    partial = await first
    await rec.close()
    assert final is not None and final.final and partial is not None and not partial.final
    assert rec.skipped == 1 and len(standin.requests) == 2


async def test_the_answer_can_depend_on_the_audio(standin):
    standin.config.answer = lambda audio, fields: f"{len(audio)} samples for {fields['model']}"
    rec = transcriber(standin, model="m")
    transcript = await rec.transcribe(tone(0.25), final=True)
    await rec.close()
    assert transcript is not None and transcript.text == "4000 samples for m"


async def test_standin_protocol_errors_and_formats(standin):
    url = standin.url + "/audio/transcriptions"
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data={"model": "m"}) as resp:  # urlencoded: not multipart
            assert resp.status == 400 and "multipart" in (await resp.json())["error"]["message"]
        form = aiohttp.FormData()
        form.add_field("model", "m")
        form.add_field("dummy", b"x", filename="x.bin")
        async with http.post(url, data=form) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["param"] == "file"
        for fmt, check in (("text", lambda r, b: b == " What time is it? \n"),
                           ("verbose_json", lambda r, b: '"duration": 0.5' in b)):
            form = aiohttp.FormData()
            form.add_field("file", wav_bytes(tone(0.5)), filename="a.wav")
            form.add_field("model", "m")
            form.add_field("response_format", fmt)
            async with http.post(url, data=form) as resp:
                assert resp.status == 200 and check(resp, await resp.text())
        form = aiohttp.FormData()
        form.add_field("file", b"not audio", filename="a.txt")
        form.add_field("model", "m")
        async with http.post(url, data=form) as resp:
            assert resp.status == 400 and "Invalid file format" in await resp.text()
        async with http.get(url) as resp:
            assert resp.status == 405
        async with http.post(standin.url + "/audio/speech") as resp:
            assert resp.status == 404 and "error" in await resp.json()


def test_standin_binds_loopback_only_and_knows_its_faults():
    with pytest.raises(ValueError):
        TranscriptionStandIn(host="0.0.0.0")
    with pytest.raises(ValueError, match="unknown faults"):
        TranscriptionStandIn().faults = "explode"  # type: ignore[assignment]
