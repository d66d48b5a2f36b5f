"""The HTTP streaming path: OpenAI's speech API through the official SDK, Ogg/Opus and the
framed stream carrying the encoder's very frames, backpressure, cancellation on disconnect."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket

import av
import numpy as np
import openai
import pytest

from gateway.api.speech_http import HTTP_STREAMS
from gateway.config import GatewayConfig
from gateway.http.frame_records import EndRecord, FrameRecord, FrameRecordParser, StreamHeader
from gateway.media.framer import Framer
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.testing.cosyvoice_server import CosyVoiceStandIn, StandInConfig
from gateway.tts.registry import VoiceRegistry, build_cosyvoice
from gateway.tts.tone import ToneSynthesizer
from tests.conftest import tone_voices
from tests.helpers import dominant_frequency


def encoder_frames(voice: str = "tone") -> list[bytes]:
    framer = Framer(FRAME_SAMPLES)
    pcm = tone_voices().get(voice).pcm()
    encoder = OpusFrameEncoder(EncoderSettings())
    return [encoder.encode(f) for f in framer.push(pcm) + framer.flush()]


def sdk(gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)


async def speech_bytes(gateway, **fields) -> tuple[bytes, dict]:
    fields = {"model": "tts-1", "voice": "alloy", "input": "Hello there.", **fields}
    async with sdk(gateway).audio.speech.with_streaming_response.create(**fields) as response:
        return await response.read(), dict(response.headers)


def decode(data: bytes) -> tuple[np.ndarray, int]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(stream)]
        return np.concatenate(frames), stream.rate


async def test_opus_is_ogg_carrying_the_encoders_very_frames(gateway):
    data, headers = await speech_bytes(gateway, response_format="opus", voice="tone")
    assert headers["content-type"] == "audio/ogg"
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert stream.codec_context.name == "opus" and stream.channels == 1
        packets = [bytes(p) for p in container.demux(stream) if p.size]
    assert packets == encoder_frames()  # byte-identical, no re-encode
    assert data[28:36] == b"OpusHead" and int.from_bytes(data[40:44], "little") == 24000
    pcm, rate = decode(data)
    assert abs(dominant_frequency(pcm, rate) - 440.0) < 1.0


async def test_pcm_and_wav_are_24k_mono_of_the_same_duration(gateway):
    pcm, headers = await speech_bytes(gateway, response_format="pcm", voice="tone")
    assert headers["content-type"] == "audio/pcm"
    samples = np.frombuffer(pcm, dtype="<i2")
    assert samples.size == 24_000  # the tone voice's 1.0 s at 24 kHz, no header
    assert abs(dominant_frequency(samples, 24_000) - 440.0) < 1.0
    wav, headers = await speech_bytes(gateway, response_format="wav", voice="tone")
    assert wav[:4] == b"RIFF" and wav[8:12] == b"WAVE" and wav[44:] == pcm
    assert int.from_bytes(wav[24:28], "little") == 24000


@pytest.mark.parametrize("fmt", ["mp3", "flac", "aac"])
async def test_encoded_formats_decode_to_the_tone(gateway, fmt):
    data, headers = await speech_bytes(gateway, response_format=fmt, voice="tone")
    assert headers["content-type"] == {"mp3": "audio/mpeg", "flac": "audio/flac",
                                       "aac": "audio/aac"}[fmt]
    pcm, rate = decode(data)
    assert 0.95 < pcm.size / rate < 1.15
    assert abs(dominant_frequency(pcm, rate) - 440.0) < 2.0


async def test_speed_stretches_without_changing_the_pitch(gateway):
    pcm, _ = await speech_bytes(gateway, response_format="pcm", voice="tone", speed=2.0)
    samples = np.frombuffer(pcm, dtype="<i2")
    assert 0.45 < samples.size / 24_000 < 0.56
    assert abs(dominant_frequency(samples, 24_000) - 440.0) < 3.0
    ogg, _ = await speech_bytes(gateway, response_format="opus", voice="tone", speed=0.5)
    decoded, rate = decode(ogg)
    assert 1.9 < decoded.size / rate < 2.1


async def test_sse_events(gateway):
    body = {"model": "gpt-4o-mini-tts", "voice": "tone", "input": "Hello",
            "response_format": "opus", "stream_format": "sse"}
    async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        text = await r.text()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["total_tokens"] > 0
    ogg = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    with av.open(io.BytesIO(ogg)) as container:
        packets = [bytes(p) for p in container.demux(container.streams.audio[0]) if p.size]
    assert packets == encoder_frames()


async def test_get_with_a_query_plays_in_an_audio_element(gateway):
    url = f"{gateway.url}/v1/audio/speech?input=hi&voice=tone&response_format=opus"
    async with gateway.http.get(url) as r:
        assert r.status == 200 and r.content_type == "audio/ogg"
        data = await r.read()
    pcm, rate = decode(data)
    assert abs(dominant_frequency(pcm, rate) - 440.0) < 1.0


@pytest.mark.parametrize(("fields", "code"), [
    ({"input": ""}, "invalid_input"),
    ({"input": "x", "response_format": "ogg"}, None),
    ({"input": "x", "speed": 5.0}, None),
    ({"input": "x", "voice": "nobody"}, "unknown_voice"),
])
async def test_bad_input_is_a_400_with_the_json_error(gateway, fields, code):
    with pytest.raises(openai.BadRequestError) as caught:
        await speech_bytes(gateway, **fields)
    error = caught.value.body
    assert isinstance(error, dict) and error["message"]
    if code is not None:
        assert error["code"] == code
    if code == "unknown_voice":
        assert "tone" in error["message"] and "alloy" in error["message"]


async def test_wrong_content_type_and_oversized_body(start_gateway):
    gateway = await start_gateway(max_body_bytes=1024)
    async with gateway.http.post(f"{gateway.url}/v1/audio/speech", data="input=hi") as r:
        assert r.status == 415 and (await r.json())["error"]["code"]
    body = {"input": "x" * 4000, "voice": "tone"}
    async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body) as r:
        assert r.status == 413 and (await r.json())["error"]["code"] == "body_too_large"


async def test_the_frame_stream_carries_the_encoders_frames(gateway):
    body = {"text": "hi", "voice": "tone"}
    parser = FrameRecordParser()
    records = []
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream", json=body) as r:
        assert r.status == 200
        assert r.content_type == "application/vnd.voice-gateway.opus-frames"
        async for chunk in r.content.iter_any():
            records += parser.feed(chunk)
    assert isinstance(records[0], StreamHeader) and isinstance(records[-1], EndRecord)
    frames = [rec for rec in records if isinstance(rec, FrameRecord)]
    assert [f.payload for f in frames] == encoder_frames()
    assert [f.sequence for f in frames] == list(range(len(frames)))
    assert [f.timestamp for f in frames] == [960 * i for i in range(len(frames))]
    # again: a phrase-cache hit, the same bytes
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream", json=body) as r:
        again = FrameRecordParser().feed(await r.read())
    assert [x.payload for x in again if isinstance(x, FrameRecord)] == encoder_frames()


async def test_a_reader_that_stalls_pauses_synthesis_and_holds_memory_flat(start_gateway):
    voices = VoiceRegistry([ToneSynthesizer(name="minutes", seconds=180.0)])
    gateway = await start_gateway(voices=voices)
    host, port = gateway.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # a small window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    body = json.dumps({"input": "long", "voice": "minutes", "response_format": "pcm"}).encode()
    writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")  # headers; then the reader stops reading
    streams = gateway.app[HTTP_STREAMS]
    try:
        leg = next(iter(streams))
        port_ = next(p for p in leg.conversation.fanout.ports if p.name == "http")
        loop = asyncio.get_running_loop()
        last, steady_since = -1, loop.time()
        while loop.time() - steady_since < 10.0:  # stalled for 10 s: nothing more produced
            await asyncio.sleep(0.5)  # sampling a counter over wall-clock time is the test
            if port_.frames_in != last:
                last, steady_since = port_.frames_in, loop.time()
            assert loop.time() < steady_since + 30
        assert len(leg.queue) <= leg.queue.maxsize
        # Synthesis paused a few hundred frames ahead: the queue (50), aiohttp's write buffer
        # and the kernel's socket buffers (capped per stream), not the 9000 frames of the text.
        assert port_.frames_in < 600
        received = 0
        while chunk := await reader.read(65536):  # read again: synthesis resumes, all arrives
            received += len(chunk)
            if b"0\r\n\r\n" in chunk[-7:]:
                break
        assert received > 180 * 48_000
        assert port_.frames_in == 180 * 50
    finally:
        writer.close()


async def test_a_live_reader_that_stalls_is_waited_for_then_gets_everything(start_gateway):
    # live frames are written from the ticker's callbacks; a paused transport hands the stream
    # to its task, which waits for the reader, then gives it back
    seconds = 15  # the kernel's and asyncio's buffers take ≈ 11 s of live 24 kHz PCM
    voices = VoiceRegistry([ToneSynthesizer(name="twelve", seconds=float(seconds))])
    gateway = await start_gateway(voices=voices)
    host, port = gateway.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    body = json.dumps({"input": "long", "voice": "twelve", "response_format": "pcm",
                       "pace": "live"}).encode()
    writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    try:
        (leg,) = gateway.app[HTTP_STREAMS]
        loop = asyncio.get_running_loop()
        last, steady_since = -1, loop.time()
        while loop.time() - steady_since < 3.0:  # nothing more written for 3 s: waiting
            await asyncio.sleep(0.25)  # sampling a counter over wall-clock time is the test
            if leg.stats.frames != last:
                last, steady_since = leg.stats.frames, loop.time()
            assert loop.time() < steady_since + 20
        assert leg.stats.frames < seconds * 50  # held back, not all written
        # the writes refused while the transport was paused went through the task (besides the
        # first frame's)
        assert leg.stats.writes - leg.stats.ticked_writes > 1
        ticked_before = leg.stats.ticked_writes
        assert len(leg.queue) <= leg.queue.maxsize
        received = 0
        while chunk := await reader.read(65536):
            received += len(chunk)
            if b"0\r\n\r\n" in chunk[-7:]:
                break
        assert received > seconds * 48_000  # all of it (plus the chunk framing)
        assert leg.stats.frames == seconds * 50
        assert leg.stats.ticked_writes > ticked_before  # back on the ticker after the wait
    finally:
        writer.close()


async def test_a_client_that_goes_away_cancels_synthesis_upstream(start_gateway):
    server = CosyVoiceStandIn(StandInConfig(sample_rate=24_000, chunk_bytes=4800,
                                            chunk_delay_ms=20))
    await server.start()
    voices = VoiceRegistry([build_cosyvoice(f"cosyvoice+{server.http_url}?spk_id=a&rate=24000",
                                            "cv")])
    gateway = await start_gateway(voices=voices)
    try:
        body = {"input": "a long text " * 200, "voice": "cv", "response_format": "opus"}
        async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body) as r:
            assert r.status == 200
            await r.content.readexactly(200)  # some audio, then hang up
        await asyncio.wait_for(server.requests[0].closed.wait(), 5)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5
        while gateway.app[HTTP_STREAMS]:
            assert loop.time() < deadline
            await asyncio.sleep(0.01)  # the handler's cleanup runs on its cancellation
    finally:
        await voices.close()
        await server.stop()


async def test_instructions_reach_a_cosyvoice_instruct_voice(start_gateway):
    server = CosyVoiceStandIn(StandInConfig(sample_rate=24_000))
    await server.start()
    spec = f"cosyvoice+{server.http_url}?mode=instruct&spk_id=a&instruct_text=calm&rate=24000"
    voices = VoiceRegistry([build_cosyvoice(spec, "cv")])
    gateway = await start_gateway(voices=voices)
    try:
        for instructions in ("Speak slowly and warmly.", None, "Speak slowly and warmly."):
            fields = {"voice": "cv", "response_format": "pcm", "input": "Hello"}
            if instructions:
                fields["instructions"] = instructions
            await speech_bytes(gateway, **fields)
        sent = [r.fields["instruct_text"] for r in server.requests]
        assert sent == ["Speak slowly and warmly.", "calm", "Speak slowly and warmly."]
    finally:
        await voices.close()
        await server.stop()


async def test_any_model_string_is_accepted_and_reported_safely(gateway):
    body = {"model": "tts\r\nX-Injected: yes\u00e9", "input": "hi", "voice": "tone",
            "response_format": "pcm"}
    async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body) as r:
        assert r.status == 200  # found by Schemathesis: a CR in the model was a 500
        assert r.headers["X-Model"] == "ttsX-Injected: yes" and "X-Injected" not in r.headers
        await r.read()


async def test_live_pace_is_real_time_after_the_lead(gateway):
    body = {"text": "hi", "voice": "tone", "pace": "live"}
    parser = FrameRecordParser()
    arrivals: list[float] = []
    loop = asyncio.get_running_loop()
    legs = set()
    async with gateway.http.post(f"{gateway.url}/v1/speech/stream", json=body) as r:
        async for chunk in r.content.iter_any():
            now = loop.time()
            legs |= gateway.app[HTTP_STREAMS]
            arrivals += [now for rec in parser.feed(chunk) if isinstance(rec, FrameRecord)]
    assert len(arrivals) == 50  # the tone voice's 1 s
    assert parser.done
    (leg,) = legs
    # every write but the first frame's and the end record's was made from the shared ticker's
    # callback, none by the task (a reader that keeps reading is never waited for)
    assert leg.stats.ticked_writes == leg.stats.writes - 2 > 0
    # frame i is due 20 ms * i - 200 ms (lead) after the first, written up to one write window
    # (--live-write-ms) early
    # (earliness is the property; lateness only bounds a loaded machine's scheduling, loosely)
    lateness = [t - (arrivals[0] + max(0.0, 0.02 * i - 0.2)) for i, t in enumerate(arrivals)]
    window = GatewayConfig().live_write_ms / 1000
    assert min(lateness) > -window - 0.01  # never more than the write window early
    assert max(lateness) < 0.5, max(lateness)
    assert arrivals[-1] - arrivals[0] > 0.98 - 0.2 - window - 0.01  # real time, not as produced
