"""Deterministic test voices: a sine tone, and a WAV file played for any text."""

from __future__ import annotations

import asyncio
import wave
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from gateway.tts.base import PcmChunk, SynthesisError


class ToneSynthesizer:
    """A sine of ``frequency`` Hz for ``seconds`` s at ``sample_rate``, whatever the text."""

    def __init__(
        self,
        name: str = "tone",
        frequency: float = 440.0,
        seconds: float = 1.0,
        sample_rate: int = 24_000,
        amplitude: float = 0.3,
        chunk_ms: int = 100,
    ) -> None:
        if not 0 < frequency < sample_rate / 2:
            raise ValueError("tone frequency must be between 0 and half the sample rate")
        if seconds <= 0 or sample_rate <= 0 or chunk_ms <= 0:
            raise ValueError("tone seconds, rate and chunk size must be positive")
        self.name = name
        self.frequency = frequency
        self.seconds = seconds
        self.sample_rate = sample_rate
        self.amplitude = amplitude
        self.chunk_ms = chunk_ms

    def samples(self, start: int, count: int) -> np.ndarray:
        t = np.arange(start, start + count) / self.sample_rate
        return (np.sin(2 * np.pi * self.frequency * t) * self.amplitude * 32767).astype("<i2")

    def pcm(self) -> np.ndarray:
        """The whole tone (for tests; streaming never builds it)."""
        return self.samples(0, round(self.seconds * self.sample_rate))

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        total = round(self.seconds * self.sample_rate)
        step = self.sample_rate * self.chunk_ms // 1000
        for start in range(0, total, step):  # chunk by chunk: an hour-long tone costs no memory
            pcm = self.samples(start, min(step, total - start))
            yield PcmChunk(pcm.tobytes(), self.sample_rate)
            await asyncio.sleep(0)

    async def close(self) -> None:
        return None


class WavFileSynthesizer:
    """Plays a 16-bit PCM WAV file (mono, or stereo downmixed) for any text."""

    def __init__(self, path: str | Path, name: str = "wav", chunk_ms: int = 100) -> None:
        self.name = name
        self.path = Path(path)
        self.chunk_ms = chunk_ms
        self._pcm, self.sample_rate = read_wav_mono(self.path)

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        data = self._pcm.tobytes()
        step = self.sample_rate * self.chunk_ms // 1000 * 2
        for i in range(0, len(data), step):
            yield PcmChunk(data[i : i + step], self.sample_rate)
            await asyncio.sleep(0)

    async def close(self) -> None:
        return None


def read_wav_mono(path: Path) -> tuple[np.ndarray, int]:
    try:
        with wave.open(str(path), "rb") as wav:
            if wav.getsampwidth() != 2:
                raise SynthesisError(f"{path}: only 16-bit PCM WAV is supported")
            channels, rate = wav.getnchannels(), wav.getframerate()
            raw = wav.readframes(wav.getnframes())
    except (OSError, wave.Error, EOFError) as exc:
        raise SynthesisError(f"cannot read WAV {path}: {exc}") from exc
    pcm = np.frombuffer(raw, dtype="<i2")
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1).astype("<i2")
    return pcm, rate


def write_wav_mono(path: str | Path, pcm: np.ndarray, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(np.asarray(pcm, dtype="<i2").tobytes())
