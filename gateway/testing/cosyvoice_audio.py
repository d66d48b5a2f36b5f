"""Audio sources for the CosyVoice stand-in: what it "synthesises".

A source turns (text, voice key, sample rate) into int16 LE mono PCM pieces of any size; the
stand-in re-chunks them to its configured wire chunk size. ``SyntheticSource`` (default) needs
nothing heavy and is deterministic; ``SynthesizerSource`` wraps any gateway Synthesizer (e.g. the
embedded Piper voice) and resamples it to the stand-in's rate.
"""

from __future__ import annotations

import importlib
import importlib.util
import zlib
from collections.abc import AsyncIterator
from typing import Protocol

import numpy as np

from gateway.tts.base import Synthesizer

PIPER_MODULE = "gateway.tts.piper_voice"


class AudioSource(Protocol):
    def render(self, text: str, voice: str, sample_rate: int) -> AsyncIterator[bytes]:
        """int16 LE mono PCM for ``text`` at ``sample_rate``, in pieces of any size."""
        ...


def synthetic_pcm(text: str, sample_rate: int, voice: str = "") -> bytes:
    """A deterministic speech-like signal: a voiced buzz whose pitch depends on text and voice,
    4 Hz syllable envelope, 60 ms per character (at least 200 ms), 10 ms fades."""
    seed = zlib.crc32(f"{voice}\0{text}".encode())
    n = int(sample_rate * max(0.2, 0.06 * len(text)))
    t = np.arange(n) / sample_rate
    f0 = 100.0 + seed % 160
    phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.04 * np.sin(2 * np.pi * 5 * t))) / sample_rate
    x = 0.55 * np.sin(phase) + 0.25 * np.sin(2 * phase) + 0.12 * np.sin(3 * phase + seed % 7)
    x *= 0.6 + 0.4 * np.sin(2 * np.pi * 4 * t + (seed >> 8) % 6)
    fade = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.01 * sample_rate))
    return np.round(x * fade * 0.5 * 32767).astype("<i2").tobytes()


class SyntheticSource:
    """The default source: ``synthetic_pcm`` as one piece."""

    async def render(self, text: str, voice: str, sample_rate: int) -> AsyncIterator[bytes]:
        yield synthetic_pcm(text, sample_rate, voice)


class SynthesizerSource:
    """Any gateway Synthesizer as a source; its PCM is resampled to the requested rate."""

    def __init__(self, synth: Synthesizer) -> None:
        self.synth = synth

    async def render(self, text: str, voice: str, sample_rate: int) -> AsyncIterator[bytes]:
        import soxr

        resampler: soxr.ResampleStream | None = None
        carry = b""
        async for chunk in self.synth.stream(text):
            data = carry + chunk.data
            carry = data[len(data) - len(data) % 2:]
            samples = np.frombuffer(data[: len(data) - len(carry)], dtype="<i2")
            if chunk.sample_rate == sample_rate:
                yield samples.tobytes()
                continue
            if resampler is None:
                resampler = soxr.ResampleStream(chunk.sample_rate, sample_rate, 1, dtype="int16")
            yield resampler.resample_chunk(samples).tobytes()
        if resampler is not None:
            yield resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True).tobytes()


def piper_available() -> bool:
    """Whether ``gateway.tts.piper_voice`` and the [voice] extra are installed."""
    if importlib.util.find_spec(PIPER_MODULE) is None:
        return False
    return bool(importlib.import_module(PIPER_MODULE).piper_available())


def piper_source() -> SynthesizerSource:
    """The embedded Piper voice (``gateway.tts.piper_voice``, the [voice] extra) as a source."""
    module = importlib.import_module(PIPER_MODULE)
    return SynthesizerSource(module.PiperSynthesizer(name="cosyvoice-stand-in"))
