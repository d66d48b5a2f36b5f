"""Writes the played audio to a WAV file as it plays: a ``ReceivePath.pcm`` frame callback.

Streaming keeps memory flat however long the client listens (no recording in the receive
path). 24 kHz mono 16-bit, one 20 ms frame per playout period, silence included.
"""

from __future__ import annotations

import wave
from pathlib import Path

from gateway.receive.pcm_source import PcmFrame, PcmSource


class WavSink:
    def __init__(self, path: str | Path, sample_rate: int = PcmSource.sample_rate) -> None:
        self.path = str(path)
        self.sample_rate = sample_rate
        self.samples = 0
        self._wav = wave.open(self.path, "wb")  # closed by close()
        self._wav.setnchannels(1)
        self._wav.setsampwidth(2)
        self._wav.setframerate(sample_rate)

    def __call__(self, frame: PcmFrame) -> None:
        self._wav.writeframes(frame.pcm.astype("<i2", copy=False).tobytes())
        self.samples += frame.pcm.size

    @property
    def seconds(self) -> float:
        return self.samples / self.sample_rate

    def close(self) -> None:
        self._wav.close()
