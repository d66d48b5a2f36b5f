"""The Smart Turn v3 model's input: the last 8 s of 16 kHz speech as Whisper log-mel features.

What the model was trained on, re-done in numpy (the reference is Pipecat's
``pipecat/audio/turn/smart_turn/_whisper_features.py`` + ``local_smart_turn_v3.py``, itself the
math of Hugging Face's ``WhisperFeatureExtractor(chunk_length=8)``): keep the last 8 s of the
segment, zero-padded *before* it to exactly 128 000 samples; normalise the waveform to zero
mean, unit variance; a centred (reflect-padded) 400-point periodic-Hann STFT every 160 samples;
power through an 80-band Slaney mel filterbank (0-8 kHz); log10 with a 1e-10 floor, the last
frame dropped, clamped to 8 below the maximum, then ``(x + 4) / 4``. Output ``(80, 800)``
float32. faster-whisper's own extractor differs (30 s window, no waveform normalisation), so it
is not reused.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

RATE = 16_000
SECONDS = 8
SAMPLES = RATE * SECONDS  # 128 000
N_FFT = 400
HOP = 160
N_MELS = 80
FRAMES = SAMPLES // HOP  # 800


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.atleast_1d(np.asarray(hz, dtype=np.float64))
    mel = 3.0 * hz / 200.0
    high = hz >= 1000.0
    mel[high] = 15.0 + np.log(hz[high] / 1000.0) * (27.0 / np.log(6.4))
    return mel


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.atleast_1d(np.asarray(mel, dtype=np.float64))
    hz = 200.0 * mel / 3.0
    high = mel >= 15.0
    hz[high] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel[high] - 15.0))
    return hz


@functools.cache
def mel_filters() -> np.ndarray:
    """``(N_FFT // 2 + 1, N_MELS)`` triangular filters, Slaney area-normalised."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0],
                                   _hz_to_mel(np.array([RATE / 2.0]))[0], N_MELS + 2))
    bins = np.linspace(0, RATE // 2, N_FFT // 2 + 1)
    slopes = edges[np.newaxis, :] - bins[:, np.newaxis]
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:N_MELS + 2] - edges[:N_MELS]))[np.newaxis, :]


@functools.cache
def _window() -> np.ndarray:
    return np.hanning(N_FFT + 1)[:-1]  # periodic Hann (torch.hann_window)


def last_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of ``audio`` (float32 in [-1, 1]), zero-padded at the start to 8 s."""
    x = np.asarray(audio, dtype=np.float32).reshape(-1)
    if len(x) >= SAMPLES:
        return x[-SAMPLES:]
    return np.concatenate([np.zeros(SAMPLES - len(x), dtype=np.float32), x])


def log_mel(audio: np.ndarray) -> np.ndarray:
    """``(N_MELS, FRAMES)`` float32 features of the last 8 s of ``audio`` (float, 16 kHz)."""
    x = last_window(audio)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), (N_FFT // 2, N_FFT // 2), mode="reflect")
    frames = sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _window(), axis=-1)) ** 2  # (frames, bins)
    mel = np.log10(np.maximum(1e-10, power @ mel_filters())).T[:, :-1]
    mel = np.maximum(mel, mel.max() - 8.0)
    return ((mel + 4.0) / 4.0).astype(np.float32)
