"""Contract tests: the CosyVoice gRPC backend against the stand-in gRPC server, over loopback."""

from __future__ import annotations

import asyncio
import socket
import wave
from pathlib import Path

import numpy as np
import pytest

from gateway.testing.cosyvoice_server import GRPC_PATH, CosyVoiceStandIn, StandInConfig
from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.cosyvoice_grpc import CosyVoiceGrpc, wav_to_pcm16k
from gateway.tts.cosyvoice_pb import cosyvoice_pb2 as pb
from gateway.tts.cosyvoice_spec import CosyVoiceConfig
from gateway.tts.registry import build_cosyvoice
from tests.cosyvoice_faults import expect_fault

TEXT = "CosyVoice over gRPC, 你好。"
VOICE = {
    "sft": {"spk_id": "中文女"},
    "zero_shot": {"prompt_text": "希望你以后能够做的比我还好呦。", "prompt_wav": "wav"},
    "cross_lingual": {"prompt_wav": "wav"},
    "instruct": {"spk_id": "中文男", "instruct_text": "Speak slowly."},
}
ONEOF = {"sft": "sft_request", "zero_shot": "zero_shot_request",
         "cross_lingual": "cross_lingual_request", "instruct": "instruct_request"}
PROMPT = np.arange(-8000, 8000, 3, dtype="<i2")


@pytest.fixture
async def standin():
    server = CosyVoiceStandIn(StandInConfig(sample_rate=24000, chunk_bytes=4800), http_port=None)
    await server.start()
    yield server
    await server.stop()


def write_wav(path: Path, samples: np.ndarray, rate: int = 16000, channels: int = 1,
              width: int = 2) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return path


@pytest.fixture
def prompt_wav(tmp_path: Path) -> Path:
    return write_wav(tmp_path / "prompt.wav", PROMPT)


def backend(standin: CosyVoiceStandIn, mode: str = "sft", wav: Path | None = None,
            **kw: object) -> CosyVoiceGrpc:
    voice = {k: (str(wav) if v == "wav" else v) for k, v in VOICE[mode].items()}
    host, port = standin.grpc_target.split(":")
    config = CosyVoiceConfig("grpc", host, int(port), mode=mode, sample_rate=24000,  # type: ignore[arg-type]
                             **voice, **kw)
    return CosyVoiceGrpc(config, f"cv-{mode}")


async def collect(synth: CosyVoiceGrpc, text: str = TEXT) -> list[PcmChunk]:
    try:
        return [chunk async for chunk in synth.stream(text)]
    finally:
        await synth.close()


@pytest.mark.parametrize("mode", list(VOICE))
async def test_every_mode_streams_the_servers_pcm(standin, prompt_wav, mode):
    synth = backend(standin, mode, prompt_wav)
    request = synth.build_request(TEXT)
    chunks = await collect(synth)
    [rec] = standin.requests
    assert (rec.protocol, rec.path, rec.mode, rec.outcome) == ("grpc", GRPC_PATH, mode,
                                                               "completed")
    assert b"".join(c.data for c in chunks) == bytes(rec.sent)
    assert len(rec.sent) == 2 * int(24000 * 0.06 * len(TEXT))
    assert len(chunks) == -(-len(rec.sent) // 4800)  # one Response per server chunk
    assert {c.sample_rate for c in chunks} == {24000}
    # What the official grpc/client.py sends: the mode's oneof, prompt as 16 kHz int16 PCM.
    assert request.WhichOneof("RequestPayload") == ONEOF[mode]
    assert rec.body == request.SerializeToString()
    voice = {k: v for k, v in VOICE[mode].items() if v != "wav"}
    assert rec.fields == {"tts_text": TEXT, **voice}
    if "prompt_wav" in VOICE[mode]:
        assert rec.prompt_audio == PROMPT.tobytes()


async def test_spec_builds_a_grpc_backend(standin):
    synth = build_cosyvoice(f"cosyvoice+grpc://{standin.grpc_target}?spk_id=a&rate=24000", "g")
    assert isinstance(synth, CosyVoiceGrpc)
    chunks = await collect(synth, "spec")
    assert b"".join(c.data for c in chunks) == bytes(standin.requests[0].sent)


@pytest.mark.parametrize("chunk_bytes", [1, 7, 4801])
async def test_odd_chunk_sizes_rejoin(standin, chunk_bytes):
    standin.config.chunk_bytes = chunk_bytes
    chunks = await collect(backend(standin), "odd")
    assert b"".join(c.data for c in chunks) == bytes(standin.requests[0].sent)


async def test_first_chunk_arrives_before_the_stream_ends(standin):
    standin.gate = asyncio.Event()
    synth = backend(standin)
    stream = synth.stream(TEXT)
    first = await anext(stream)
    rec = standin.requests[0]
    assert len(first.data) == 4800 and not rec.finished.is_set()
    standin.gate.set()
    rest = [c.data async for c in stream]
    assert first.data + b"".join(rest) == bytes(rec.sent)
    await synth.close()


async def test_aclose_mid_stream_cancels_the_rpc(standin):
    standin.gate = asyncio.Event()
    synth = backend(standin)
    stream = synth.stream(TEXT)
    await anext(stream)
    await stream.aclose()
    rec = standin.requests[0]
    await asyncio.wait_for(rec.finished.wait(), 5)
    await asyncio.wait_for(rec.closed.wait(), 5)
    assert rec.outcome == "cancelled"
    await synth.close()


async def test_task_cancellation_cancels_the_rpc(standin):
    standin.config.first_chunk_delay_ms = 60_000
    synth = backend(standin)

    async def consume() -> None:
        async for _ in synth.stream(TEXT):
            pass

    task = asyncio.create_task(consume())
    [rec] = await standin.wait_requests(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(rec.finished.wait(), 5)
    assert rec.outcome == "cancelled" and not rec.sent
    await synth.close()


@pytest.mark.parametrize(("fault", "message"), [
    ("refuse", r"RPC failed \(UNAVAILABLE: injected fault: refuse\)"),
    ("http500", r"RPC failed \(UNKNOWN: Exception iterating responses"),
    ("http422", r"RPC failed \(INVALID_ARGUMENT: "),
    ("timeout_before_first", r"no audio for 0\.3 s \(after 0 bytes\)"),
    ("cut_mid_stream", r"stream cut after \d+ bytes \(UNAVAILABLE: "),
])
async def test_faults_raise_and_end_the_rpc(standin, fault, message):
    standin.faults = fault
    standin.config.chunk_bytes = 1001
    synth = backend(standin, first_chunk_timeout=0.3)
    await expect_fault(standin, synth, TEXT, fault, message, standin.grpc_target)


async def test_connection_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    synth = CosyVoiceGrpc(CosyVoiceConfig("grpc", "127.0.0.1", port, spk_id="a"), "gone")
    with pytest.raises(SynthesisError, match=rf"127\.0\.0\.1:{port}.*RPC failed \(UNAVAILABLE"):
        await collect(synth)


async def test_blank_text_sends_nothing(standin):
    assert await collect(backend(standin), "  ") == []
    assert standin.requests == []


def test_official_server_treats_an_empty_request_as_instruct():
    assert pb.Request().WhichOneof("RequestPayload") is None  # server.py's else-branch


def test_wav_16k_mono_int16_passes_through(prompt_wav):
    assert wav_to_pcm16k(prompt_wav) == PROMPT.tobytes()


def test_wav_is_downmixed_and_resampled(tmp_path):
    t = np.arange(32000) / 32000
    tone = (np.sin(2 * np.pi * 440 * t) * 10000).astype("<i2")
    stereo = np.stack([tone, tone // 2], axis=1).reshape(-1)
    pcm = np.frombuffer(wav_to_pcm16k(write_wav(tmp_path / "s.wav", stereo, 32000, 2)), "<i2")
    assert abs(len(pcm) - 16000) <= 1
    assert 0.7 * 7500 < np.abs(pcm[1000:-1000]).max() < 1.05 * 7500  # mean of the channels


def test_wav_24bit(tmp_path):
    samples = np.array([0, 1 << 22, -(1 << 22), (1 << 23) - 1], dtype="<i4")
    raw = b"".join(int(s).to_bytes(4, "little", signed=True)[:3] for s in samples)
    path = tmp_path / "24.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(3)
        w.setframerate(16000)
        w.writeframes(raw)
    assert np.frombuffer(wav_to_pcm16k(path), "<i2").tolist() == [0, 16384, -16384, 32767]


def test_bad_prompt_wav(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"not a wav")
    with pytest.raises(ValueError, match="cannot read prompt_wav"):
        wav_to_pcm16k(tmp_path / "x.wav")
    with pytest.raises(ValueError, match="cannot read prompt_wav"):
        CosyVoiceGrpc(CosyVoiceConfig("grpc", "h", mode="cross_lingual",
                                      prompt_wav=str(tmp_path / "missing.wav")), "x")
