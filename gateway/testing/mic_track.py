"""A microphone for aiortc peers: speaks a recording into a sendrecv session in real time.

``RecordedMic(pcm, rate)`` is an aiortc audio track that yields 20 ms frames of the recording
on an absolute schedule (as a live microphone would), then silence -- so a listener's VAD sees
the speech end -- until stopped. aiortc's own Opus encoder compresses it, as a browser's does.
``started``/``finished`` tell when the recording's first and last frames went out.
"""

from __future__ import annotations

import asyncio
import fractions
import time

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

FRAME_S = 0.020


def opus_packets(frames48: list[np.ndarray]) -> list[bytes]:
    """What aiortc's Opus encoder (a browser's stand-in) sends for 20 ms frames of 48 kHz mono
    int16 audio, each given as stereo as a capture device gives it: one packet a frame."""
    from aiortc.codecs.opus import OpusEncoder

    encoder, out = OpusEncoder(), []
    for i, mono in enumerate(frames48):
        frame = av.AudioFrame.from_ndarray(np.repeat(mono, 2).reshape(1, -1), format="s16",
                                           layout="stereo")
        frame.sample_rate, frame.pts = 48_000, i * 960
        frame.time_base = fractions.Fraction(1, 48_000)
        packets, _ = encoder.encode(frame)
        out.append(bytes(packets[0]))
    return out


class RecordedMic(MediaStreamTrack):
    kind = "audio"

    def __init__(self, pcm: np.ndarray, rate: int, lead_silence_s: float = 0.3) -> None:
        super().__init__()
        self.rate = rate
        self.frame_samples = int(rate * FRAME_S)
        pad = np.zeros(int(lead_silence_s * rate), dtype=np.int16)
        self._pcm = np.concatenate((pad, np.asarray(pcm, dtype=np.int16)))
        self._lead = len(pad)
        self._pos = 0
        self._t0: float | None = None
        self._index = 0
        self.started_at: float | None = None  # monotonic: first recorded (non-pad) frame out
        self.finished_at: float | None = None  # ... the recording's last frame out
        self.finished = asyncio.Event()

    def play(self, pcm: np.ndarray) -> None:
        """Queue another recording after what is playing (silence in between stays)."""
        rest = self._pcm[self._pos :]
        self._pcm = np.concatenate((rest, np.asarray(pcm, dtype=np.int16)))
        self._pos, self._lead = 0, len(rest)
        self.started_at = self.finished_at = None
        self.finished.clear()

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._t0 is None:
            self._t0 = time.monotonic()
        due = self._t0 + self._index * FRAME_S
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # a microphone delivers in real time
        n = self.frame_samples
        chunk = self._pcm[self._pos : self._pos + n]
        now = time.monotonic()
        if self._pos <= self._lead < self._pos + n and self.started_at is None:
            self.started_at = now
        self._pos += len(chunk)
        if len(chunk) and self._pos >= len(self._pcm) and not self.finished.is_set():
            self.finished_at = now
            self.finished.set()
        if len(chunk) < n:
            chunk = np.concatenate((chunk, np.zeros(n - len(chunk), dtype=np.int16)))
        frame = av.AudioFrame.from_ndarray(chunk.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self._index * n
        frame.time_base = fractions.Fraction(1, self.rate)
        self._index += 1
        return frame
