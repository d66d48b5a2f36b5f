"""Streaming sample-rate conversion to the gateway's 24 kHz, with libsoxr (never by hand)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import soxr

TARGET_RATE = 24_000
_INT16 = np.dtype(np.int16)


class Resampler:
    """Converts a stream of int16 mono chunks from ``in_rate`` to ``out_rate`` (default 24 kHz).

    Passthrough when the rates match. ``flush`` drains the filter's delay line at the end of an
    utterance so its last milliseconds are not lost.

    An int16 1-D contiguous chunk (a talker's 20 ms, every period) goes to the stream's
    converter as ``resample_chunk`` would hand it (an ``(n, 1)`` view), without that method's
    checks, re-shapes and ``np.squeeze`` call: the same output (tested: the same sizes, the
    samples within libsoxr's int16 dither, which tells any two streams apart), less Python
    around libsoxr. Anything else, or a soxr without that converter, takes
    ``resample_chunk``.
    """

    def __init__(self, in_rate: int, out_rate: int = TARGET_RATE, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._stream: soxr.ResampleStream | None = None
        self._process: Callable[[np.ndarray, bool], np.ndarray] | None = None
        if in_rate != out_rate:
            self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=quality)
            self._process = getattr(self._stream, "_process", None)  # (int16, 2-D in and out)

    def push(self, samples: np.ndarray) -> np.ndarray:
        if self._stream is None:
            return samples
        if not samples.size:
            return samples
        process = self._process
        if (process is not None and type(samples) is np.ndarray and samples.dtype is _INT16
                and samples.ndim == 1 and samples.flags.c_contiguous):
            return process(samples.reshape(-1, 1), False).reshape(-1)
        return self._stream.resample_chunk(np.ascontiguousarray(samples, dtype=np.int16))

    def flush(self) -> np.ndarray:
        if self._stream is None:
            return np.zeros(0, dtype=np.int16)
        return self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True)


class RateFollower:
    """A ``Resampler`` that follows a stream whose input rate may change between chunks (a TTS
    backend switching models mid-utterance): on a change the old converter's delay line is
    flushed first, so the samples at the end of the old rate are not lost."""

    def __init__(self, out_rate: int = TARGET_RATE) -> None:
        self.out_rate = out_rate
        self._resampler: Resampler | None = None

    def push(self, samples: np.ndarray, in_rate: int) -> np.ndarray:
        current = self._resampler
        if current is not None and current.in_rate == in_rate:
            return current.push(samples)
        tail = current.flush() if current is not None else None
        self._resampler = Resampler(in_rate, self.out_rate)
        out = self._resampler.push(samples)
        return out if tail is None or not tail.size else np.concatenate((tail, out))

    def flush(self) -> np.ndarray:
        if self._resampler is None:
            return np.zeros(0, dtype=np.int16)
        return self._resampler.flush()
