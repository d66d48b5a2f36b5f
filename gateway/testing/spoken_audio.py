"""Test audio for the listening side: English speech from Debian's ``espeak-ng`` program,
silence and white-noise bursts, all as 16 kHz int16 mono numpy arrays.

``espeak-ng`` is an apt package (``apt-get install -y espeak-ng``), not a Python dependency:
``have_espeak()`` tells tests whether to skip. Speech is resampled 22050 -> 16000 Hz with soxr.
"""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import soxr

RATE = 16_000


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, *, voice: str = "en-us", words_per_minute: int = 150,
          rate: int = RATE) -> np.ndarray:
    """``text`` spoken by espeak-ng, as int16 mono at ``rate`` (leading/trailing silence kept)."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install -y espeak-ng)")
    wav = subprocess.run([exe, "-v", voice, "-s", str(words_per_minute), "--stdout", text],
                         check=True, capture_output=True, timeout=30).stdout
    # A canonical 44-byte header whose lengths are placeholders (espeak-ng streams to stdout).
    if wav[:4] != b"RIFF" or wav[36:40] != b"data":
        raise RuntimeError("espeak-ng wrote no canonical WAV header")
    source_rate = struct.unpack_from("<I", wav, 24)[0]
    raw = wav[44:]
    pcm = np.frombuffer(raw[: len(raw) // 2 * 2], dtype="<i2")
    if source_rate == rate:
        return pcm.copy()
    out = soxr.resample(pcm.astype(np.float32) / 32768.0, source_rate, rate, quality="HQ")
    return np.clip(np.round(out * 32767.0), -32768, 32767).astype(np.int16)


def silence(seconds: float, rate: int = RATE) -> np.ndarray:
    return np.zeros(round(seconds * rate), dtype=np.int16)


def noise(seconds: float, *, level: float = 0.3, seed: int = 0, rate: int = RATE) -> np.ndarray:
    """White noise with RMS ``level`` of full scale (0.3 is loud: about -10 dBFS)."""
    rng = np.random.default_rng(seed)
    samples = rng.normal(0.0, level, round(seconds * rate)) * 32767.0
    return np.clip(samples, -32768, 32767).astype(np.int16)


def concat(*parts: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(p, dtype=np.int16) for p in parts])


def mix(base: np.ndarray, overlay: np.ndarray, at_seconds: float, rate: int = RATE) -> np.ndarray:
    """``base`` with ``overlay`` added from ``at_seconds`` on (clipped to int16)."""
    out = base.astype(np.int32)
    start = round(at_seconds * rate)
    end = min(len(out), start + len(overlay))
    out[start:end] += overlay[: end - start]
    return np.clip(out, -32768, 32767).astype(np.int16)


def trim(pcm: np.ndarray, threshold: int = 64) -> np.ndarray:
    """``pcm`` without leading and trailing near-silence."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > threshold)
    return pcm[loud[0]: loud[-1] + 1] if loud.size else pcm[:0]


def frames(pcm: np.ndarray, frame_samples: int = 320) -> list[np.ndarray]:
    """``pcm`` cut into whole frames (a partial last frame is zero-padded)."""
    pad = (-len(pcm)) % frame_samples
    padded = np.concatenate([pcm, np.zeros(pad, dtype=np.int16)]) if pad else pcm
    return list(padded.reshape(-1, frame_samples))
