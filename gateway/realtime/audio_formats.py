"""The Realtime API's audio formats, to and from the gateway's int16 PCM.

``audio/pcm`` is 24 kHz 16-bit little-endian mono; ``audio/pcmu`` and ``audio/pcma`` are 8 kHz
G.711 (mu-law / A-law, ITU-T G.711), what telephony bridges send. G.711 is a table per byte
(numpy), rates are changed by libsoxr (``media.resample``), never by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gateway.media.resample import Resampler

PCM, PCMU, PCMA = "audio/pcm", "audio/pcmu", "audio/pcma"
FORMATS = (PCM, PCMU, PCMA)
RATES = {PCM: 24_000, PCMU: 8_000, PCMA: 8_000}
#: the beta API's names (``input_audio_format``: "pcm16", "g711_ulaw", "g711_alaw")
BETA_NAMES = {PCM: "pcm16", PCMU: "g711_ulaw", PCMA: "g711_alaw"}


def _ulaw_table() -> np.ndarray:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    sign, exponent, mantissa = u & 0x80, (u >> 4) & 0x07, u & 0x0F
    magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _alaw_table() -> np.ndarray:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    sign, exponent, mantissa = a & 0x80, (a >> 4) & 0x07, a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8,
                         ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


ULAW_DECODE = _ulaw_table()
ALAW_DECODE = _alaw_table()


def _encoder(decode: np.ndarray) -> np.ndarray:
    """A 65536-entry table: each int16 value -> the code whose decoded value is nearest."""
    order = np.argsort(decode.astype(np.int32), kind="stable")
    values = decode[order].astype(np.int32)
    samples = np.arange(-32768, 32768, dtype=np.int32)
    right = np.clip(np.searchsorted(values, samples), 1, len(values) - 1)
    left = right - 1
    nearer_left = (samples - values[left]) <= (values[right] - samples)
    return order[np.where(nearer_left, left, right)].astype(np.uint8)


ULAW_ENCODE = _encoder(ULAW_DECODE)
ALAW_ENCODE = _encoder(ALAW_DECODE)


def decode_g711(data: bytes, kind: str) -> np.ndarray:
    table = ULAW_DECODE if kind == PCMU else ALAW_DECODE
    return table[np.frombuffer(data, dtype=np.uint8)]


def encode_g711(pcm: np.ndarray, kind: str) -> bytes:
    table = ULAW_ENCODE if kind == PCMU else ALAW_ENCODE
    return table[pcm.astype(np.int32) + 32768].tobytes()


class BadAudio(ValueError):
    """Bytes that are not audio in the declared format (an odd byte count of PCM16)."""


@dataclass(eq=False)
class InputDecoder:
    """One session's input: bytes in ``kind`` -> int16 at ``out_rate`` (streaming)."""

    kind: str
    out_rate: int

    def __post_init__(self) -> None:
        self._resampler = Resampler(RATES[self.kind], self.out_rate)

    def decode(self, data: bytes) -> np.ndarray:
        if self.kind == PCM:
            if len(data) % 2:
                raise BadAudio(f"{len(data)} bytes is not whole 16-bit samples")
            samples = np.frombuffer(data, dtype="<i2").astype(np.int16)
        else:
            samples = decode_g711(data, self.kind)
        return self._resampler.push(samples)


@dataclass(eq=False)
class OutputEncoder:
    """One session's output: the speaker's 24 kHz int16 PCM -> bytes in ``kind``."""

    kind: str

    def __post_init__(self) -> None:
        self._resampler = Resampler(24_000, RATES[self.kind])

    def encode(self, pcm24k: bytes) -> bytes:
        if self.kind == PCM:
            return pcm24k
        samples = self._resampler.push(np.frombuffer(pcm24k, dtype="<i2"))
        return encode_g711(samples, self.kind)

    def duration_ms(self, data: bytes) -> float:
        per_second = RATES[self.kind] * (2 if self.kind == PCM else 1)
        return len(data) * 1000 / per_second
