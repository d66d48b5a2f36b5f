"""The listening side's audio format: 16 kHz signed 16-bit mono, cut in 20 ms frames."""

from __future__ import annotations

import io
import wave

import numpy as np

RATE = 16_000
FRAME_MS = 20
FRAME_SAMPLES = RATE * FRAME_MS // 1000  # 320


INT16 = np.dtype(np.int16)  # (a singleton: ``array.dtype is INT16`` is the quick test)


def as_int16(pcm: np.ndarray | bytes) -> np.ndarray:
    """int16 samples from int16 bytes/arrays or float arrays in [-1, 1]."""
    if type(pcm) is np.ndarray and pcm.dtype is INT16:  # the frames' case, every 20 ms
        return pcm
    if isinstance(pcm, bytes | bytearray | memoryview):
        return np.frombuffer(pcm, dtype="<i2")
    array = np.asarray(pcm)
    if array.dtype == np.int16:
        return array
    if np.issubdtype(array.dtype, np.floating):
        return np.clip(np.round(array * 32767.0), -32768, 32767).astype(np.int16)
    raise TypeError(f"expected int16 or float samples, not {array.dtype}")


def as_float32(pcm: np.ndarray | bytes) -> np.ndarray:
    """float32 samples in [-1, 1) (what Whisper and Silero take)."""
    if type(pcm) is np.ndarray and pcm.dtype is INT16:  # the frames' case, every 20 ms
        return pcm.astype(np.float32) / 32768.0
    array = pcm if isinstance(pcm, np.ndarray) else as_int16(pcm)
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float32, copy=False)
    return as_int16(array).astype(np.float32) / 32768.0


def wav_bytes(pcm: np.ndarray, rate: int = RATE) -> bytes:
    """A canonical 16-bit mono WAV file holding ``pcm``."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes(as_int16(pcm).astype("<i2", copy=False).tobytes())
    return out.getvalue()
