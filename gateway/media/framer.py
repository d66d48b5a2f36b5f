"""Cut a stream of s16le mono PCM into fixed 20 ms frames.

Input may arrive in chunks of any byte length, including odd lengths that split a sample in half
(network TTS backends pass bytes through as they arrive). ``SampleAligner`` re-joins split samples;
``Framer`` accumulates whole samples and emits frames of exactly ``frame_samples``; ``flush``
pads the tail with silence so the last partial frame is not lost.
"""

from __future__ import annotations

import numpy as np


class SampleAligner:
    """Turns byte chunks of any length into whole int16 samples, carrying a split byte over."""

    __slots__ = ("_carry",)

    def __init__(self) -> None:
        self._carry = b""

    def push(self, data: bytes) -> np.ndarray:
        if self._carry:
            data = self._carry + data
        whole = len(data) & ~1
        self._carry = data[whole:]
        return np.frombuffer(data[:whole], dtype="<i2")

    @property
    def pending_byte(self) -> bool:
        return bool(self._carry)


class Framer:
    """Accumulates int16 samples and yields frames of exactly ``frame_samples`` (as bytes)."""

    def __init__(self, frame_samples: int = 480) -> None:
        if frame_samples <= 0:
            raise ValueError("frame_samples must be positive")
        self.frame_samples = frame_samples
        self._buf = np.zeros(0, dtype="<i2")

    def push(self, samples: np.ndarray) -> list[bytes]:
        if samples.dtype != np.dtype("<i2"):
            samples = samples.astype("<i2")
        buf = np.concatenate((self._buf, samples)) if self._buf.size else samples
        n = buf.size // self.frame_samples
        cut = n * self.frame_samples
        frames = [
            buf[i : i + self.frame_samples].tobytes() for i in range(0, cut, self.frame_samples)
        ]
        self._buf = buf[cut:].copy()
        return frames

    def flush(self) -> list[bytes]:
        """The partial tail, zero-padded to a full frame (nothing when no tail remains)."""
        if not self._buf.size:
            return []
        tail = np.zeros(self.frame_samples, dtype="<i2")
        tail[: self._buf.size] = self._buf
        self._buf = np.zeros(0, dtype="<i2")
        return [tail.tobytes()]

    @property
    def buffered_samples(self) -> int:
        return int(self._buf.size)
