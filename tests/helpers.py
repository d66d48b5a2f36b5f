"""Signal checks shared by tests."""

from __future__ import annotations

import numpy as np


def dominant_frequency(pcm: np.ndarray, rate: int) -> float:
    """Peak of the windowed spectrum, refined by parabolic interpolation (sub-bin accuracy)."""
    x = pcm.astype(np.float64)
    x -= x.mean()
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    k = int(np.argmax(spectrum[1:]) + 1)
    a, b, c = np.log(spectrum[k - 1 : k + 2] + 1e-12)
    offset = 0.5 * (a - c) / (a - 2 * b + c)
    return (k + offset) * rate / x.size
