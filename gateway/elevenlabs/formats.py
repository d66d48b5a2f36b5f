"""ElevenLabs' ``output_format`` values: the audio a context or request is sent in.

``parse_output_format("pcm_24000")`` -> ``OutputFormat``; ``OutputFormat.open()`` -> an
incremental encoder fed int16 mono PCM at the format's own rate (``write(pcm) -> bytes``, then
``flush() -> bytes``). Served:

- ``pcm_8000|16000|22050|24000|44100|48000``: raw s16le mono at that rate;
- ``ulaw_8000``: G.711 mu-law at 8 kHz (what telephony bridges ask for);
- ``mp3_<rate>_<kbps>`` (22050_32, 44100_32/64/96/128/192; LiveKit's default is mp3_22050_32):
  MPEG layer III frames from libmp3lame, no ID3 tag, no Xing frame;
- ``opus_48000_<kbps>`` (32/64/96/128/192): Ogg/Opus from libopus at 48 kHz.

Anything else -> ``ValueError`` naming what is served.
"""

from __future__ import annotations

import fractions
from dataclasses import dataclass
from typing import Protocol

import av
import numpy as np

from gateway.http.transcode import ChunkSink

PCM_RATES = (8000, 16000, 22050, 24000, 44100, 48000)
MP3 = {(22050, 32), (44100, 32), (44100, 64), (44100, 96), (44100, 128), (44100, 192)}
OPUS_KBPS = (32, 64, 96, 128, 192)
DEFAULT = "mp3_44100_128"  # ElevenLabs' own default


class Encoder(Protocol):
    def write(self, pcm: bytes) -> bytes: ...
    def flush(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class OutputFormat:
    name: str
    codec: str  # pcm | ulaw | mp3 | opus
    sample_rate: int
    kbps: int = 0

    @property
    def media_type(self) -> str:
        return {"pcm": "audio/pcm", "ulaw": "audio/basic", "mp3": "audio/mpeg",
                "opus": "audio/ogg"}[self.codec]

    def open(self) -> Encoder:
        if self.codec == "pcm":
            return _Raw()
        if self.codec == "ulaw":
            return _Ulaw()
        if self.codec == "mp3":
            return _Container("mp3", "libmp3lame", self.sample_rate, self.kbps,
                              {"id3v2_version": "0", "write_xing": "0"})
        return _Container("ogg", "libopus", self.sample_rate, self.kbps, {})


def names() -> list[str]:
    return ([f"pcm_{r}" for r in PCM_RATES] + ["ulaw_8000"]
            + [f"mp3_{r}_{k}" for r, k in sorted(MP3)] + [f"opus_48000_{k}" for k in OPUS_KBPS])


def parse_output_format(value: str | None) -> OutputFormat:
    name = value or DEFAULT
    parts = name.split("_")
    try:
        codec, rate = parts[0], int(parts[1])
        kbps = int(parts[2]) if len(parts) == 3 else 0
    except (IndexError, ValueError):
        codec, rate, kbps = "", 0, 0
    ok = ((codec == "pcm" and len(parts) == 2 and rate in PCM_RATES)
          or (codec == "ulaw" and len(parts) == 2 and rate == 8000)
          or (codec == "mp3" and (rate, kbps) in MP3)
          or (codec == "opus" and rate == 48000 and kbps in OPUS_KBPS))
    if not ok:
        raise ValueError(f"output_format {name!r} is not served; use one of {', '.join(names())}")
    return OutputFormat(name, codec, rate, kbps)


class _Raw:
    def __init__(self) -> None:
        self._odd = b""

    def write(self, pcm: bytes) -> bytes:
        data = self._odd + pcm
        cut = len(data) & ~1
        self._odd = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        return b""


def mulaw(samples: np.ndarray) -> bytes:
    """int16 -> G.711 mu-law bytes (ITU-T G.711, as the reference implementation and Python's
    audioop.lin2ulaw compute it: 14-bit magnitude, bias 33, segment and 4-bit mantissa)."""
    x = samples.astype(np.int32) >> 2
    mask = np.where(x < 0, 0x7F, 0xFF)
    mag = np.minimum(np.abs(x), 8159) + 0x21
    seg = np.clip(np.floor(np.log2(mag)).astype(np.int32) - 5, 0, 8)
    uval = np.where(seg > 7, 0x7F, (np.minimum(seg, 7) << 4) | ((mag >> (seg + 1)) & 0x0F))
    return ((uval ^ mask) & 0xFF).astype(np.uint8).tobytes()


class _Ulaw(_Raw):
    def write(self, pcm: bytes) -> bytes:
        return mulaw(np.frombuffer(super().write(pcm), dtype="<i2"))


class _Container:
    """An FFmpeg encoder + muxer into a non-seekable sink drained on every call."""

    def __init__(self, muxer: str, codec: str, rate: int, kbps: int,
                 options: dict[str, str]) -> None:
        self._sink = ChunkSink()
        self._rate = rate
        self._container = av.open(self._sink, "w", format=muxer,
                                  container_options={"flush_packets": "1", **options})
        self._stream = self._container.add_stream(codec, rate=rate, layout="mono")
        self._stream.codec_context.bit_rate = kbps * 1000
        self._raw = _Raw()
        self._pts = 0
        self._closed = False

    def write(self, pcm: bytes) -> bytes:
        data = self._raw.write(pcm)
        if data and not self._closed:
            samples = np.frombuffer(data, dtype="<i2").reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
            frame.sample_rate, frame.pts = self._rate, self._pts
            frame.time_base = fractions.Fraction(1, self._rate)
            self._pts += samples.shape[1]
            self._container.mux(self._stream.encode(frame))
        return self._sink.drain()

    def flush(self) -> bytes:
        if not self._closed:
            self._closed = True
            self._container.mux(self._stream.encode(None))
            self._container.close()
        return self._sink.drain()
