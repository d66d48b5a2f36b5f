"""CosyVoice over its gRPC server (``runtime/python/grpc``): the ``CosyVoice.Inference`` stream.

The request is built like the official ``grpc/client.py``: one ``Request`` whose oneof holds the
mode's message; for zero_shot / cross_lingual the prompt travels as ``prompt_audio`` = raw int16
PCM at 16 kHz mono (the client's ``load_wav(path, 16000) * 2**15``), decoded here once from the
configured WAV (PCM 8/16/24/32-bit, channels averaged, resampled with soxr when not 16 kHz). Each
``Response.tts_audio`` is yielded as it arrives. Cancelling or closing the iterator cancels the RPC.

The stubs in ``gateway/tts/cosyvoice_pb`` are generated; regenerate with
``python -m gateway.tts.cosyvoice_pb`` (grpcio-tools).
"""

from __future__ import annotations

import asyncio
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np

from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.cosyvoice_pb import cosyvoice_pb2 as pb
from gateway.tts.cosyvoice_pb import cosyvoice_pb2_grpc as pb_grpc
from gateway.tts.cosyvoice_spec import CosyVoiceConfig

PROMPT_RATE = 16000
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 5000),
]


def wav_to_pcm16k(path: str | Path) -> bytes:
    """A PCM WAV file as int16 mono 16 kHz bytes (exactly its samples if already 16 kHz mono)."""
    try:
        with wave.open(str(path), "rb") as wav:
            width, channels = wav.getsampwidth(), wav.getnchannels()
            rate, frames = wav.getframerate(), wav.readframes(wav.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise ValueError(f"cannot read prompt_wav {str(path)!r} as PCM WAV: {exc}") from exc
    if width == 2 and channels == 1 and rate == PROMPT_RATE:
        return frames
    if width == 3:
        raw = np.frombuffer(frames, dtype=np.uint8).reshape(-1, 3)
        ints = (raw[:, 0].astype(np.int32) | raw[:, 1].astype(np.int32) << 8
                | raw[:, 2].astype(np.int8).astype(np.int32) << 16)
        x = ints / float(1 << 23)
    elif width == 1:
        x = (np.frombuffer(frames, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    else:
        x = np.frombuffer(frames, dtype=f"<i{width}") / float(1 << (8 * width - 1))
    x = x.reshape(-1, channels).mean(axis=1)
    if rate != PROMPT_RATE:
        import soxr

        x = soxr.resample(x, rate, PROMPT_RATE)
    return np.clip(x * 32768.0, -32768, 32767).astype("<i2").tobytes()


class CosyVoiceGrpc:
    """A Synthesizer backed by a CosyVoice gRPC server. One grpc.aio channel per backend."""

    def __init__(self, config: CosyVoiceConfig, name: str) -> None:
        if config.transport != "grpc":
            raise ValueError("CosyVoiceGrpc needs a grpc config")
        self.name = name
        self.config = config
        self.target = config.grpc_target
        self._prompt = wav_to_pcm16k(config.prompt_wav) if config.prompt_wav else b""
        self._channel: grpc.aio.Channel | None = None

    takes_instructions = True  # instruct mode: a request's own instruct_text

    def build_request(self, text: str, instructions: str | None = None) -> pb.Request:
        """The ``Request`` the official client sends for this voice and ``text``."""
        c = self.config
        if c.mode == "sft":
            return pb.Request(sft_request=pb.sftRequest(spk_id=c.spk_id, tts_text=text))
        if c.mode == "zero_shot":
            return pb.Request(zero_shot_request=pb.zeroshotRequest(
                tts_text=text, prompt_text=c.prompt_text, prompt_audio=self._prompt))
        if c.mode == "cross_lingual":
            return pb.Request(cross_lingual_request=pb.crosslingualRequest(
                tts_text=text, prompt_audio=self._prompt))
        return pb.Request(instruct_request=pb.instructRequest(
            tts_text=text, spk_id=c.spk_id, instruct_text=instructions or c.instruct_text))

    def _fail(self, what: str) -> SynthesisError:
        return SynthesisError(f"CosyVoice voice {self.name!r} (grpc://{self.target}): {what}")

    def _stub(self) -> pb_grpc.CosyVoiceStub:
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self.target, options=_CHANNEL_OPTIONS)
        return pb_grpc.CosyVoiceStub(self._channel)

    async def stream(
        self, text: str, *, instructions: str | None = None
    ) -> AsyncIterator[PcmChunk]:
        if not text.strip():
            return
        cfg = self.config
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.first_chunk_timeout
        call = self._stub().Inference(self.build_request(text, instructions))
        received = 0
        try:
            while True:
                limit = deadline if received == 0 else loop.time() + cfg.chunk_timeout
                try:
                    async with asyncio.timeout_at(limit):
                        reply = await call.read()
                except TimeoutError:
                    wait = cfg.first_chunk_timeout if received == 0 else cfg.chunk_timeout
                    raise self._fail(
                        f"no audio for {wait:g} s (after {received} bytes)") from None
                except grpc.aio.AioRpcError as exc:
                    status = f"{exc.code().name}: {exc.details()}"
                    if received:
                        raise self._fail(f"stream cut after {received} bytes ({status})") from exc
                    raise self._fail(f"RPC failed ({status})") from exc
                if reply is grpc.aio.EOF:
                    return
                if reply.tts_audio:
                    received += len(reply.tts_audio)
                    yield PcmChunk(reply.tts_audio, cfg.sample_rate)
        finally:
            call.cancel()  # no-op once the RPC has finished

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
