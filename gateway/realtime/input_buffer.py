"""A Realtime session's input audio on its way in (16 kHz PCM): the buffer a client commits
itself when there is no turn detection (bounded: ``MAX_BUFFER_S``; at least
``MIN_COMMIT_MS`` to commit), and the cutting of what comes into the listener's 20 ms frames.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gateway.realtime.protocol import ClientError

ASR_RATE, FRAME = 16_000, 320  # the listener's 20 ms frames
MAX_BUFFER_S = 60  # the input buffer without turn detection
MIN_COMMIT_MS = 100  # OpenAI's least committable buffer


class InputBuffer:
    """Audio held for ``input_audio_buffer.commit`` (no turn detection)."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self.samples = 0

    def has_room(self, samples: int) -> bool:
        return self.samples + samples <= MAX_BUFFER_S * ASR_RATE

    def add(self, pcm: np.ndarray, event_id: str | None) -> None:
        """Buffer ``pcm``, or refuse it (an ``error`` event) when the buffer is full."""
        if not self.has_room(pcm.size):
            raise ClientError("input_audio_buffer_full", f"the input audio buffer holds at "
                              f"most {MAX_BUFFER_S} s: commit or clear it", "audio", event_id)
        self.keep(pcm)

    def keep(self, pcm: np.ndarray) -> None:
        self._chunks.append(pcm)
        self.samples += pcm.size

    def take(self, event_id: str | None) -> np.ndarray:
        """Everything buffered, for a commit (refused under ``MIN_COMMIT_MS``)."""
        if self.samples < MIN_COMMIT_MS * ASR_RATE // 1000:
            raise ClientError("input_audio_buffer_commit_empty", "Error committing input audio "
                              f"buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of "
                              f"audio, but buffer only has "
                              f"{self.samples * 1000 // ASR_RATE}ms of audio.", None, event_id)
        audio = np.concatenate(self._chunks)
        self.clear()
        return audio

    def clear(self) -> None:
        self._chunks, self.samples = [], 0


class FrameCutter:
    """Audio in any lengths -> the listener's 20 ms frames (the rest kept for the next)."""

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.int16)  # under one listener frame

    def frames(self, pcm: np.ndarray) -> Iterator[np.ndarray]:
        if self._pending.size:
            pcm = np.concatenate((self._pending, pcm))
        cut = pcm.size - pcm.size % FRAME
        self._pending = pcm[cut:]
        for start in range(0, cut, FRAME):
            yield pcm[start:start + FRAME]

    def reset(self) -> None:
        self._pending = np.zeros(0, dtype=np.int16)
