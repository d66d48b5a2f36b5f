"""Incremental encoders from 24 kHz s16le mono PCM to the OpenAI route's non-Opus formats.

``open_encoder(fmt)`` gives an object whose ``write(pcm) -> bytes`` returns whatever encoded
bytes are ready now and whose ``flush() -> bytes`` ends the stream; any chunking of the PCM
works (an odd trailing byte waits for its pair). Each format is in the container a client
plays as it arrives, written to a non-seekable sink (nothing is rewritten afterwards):

- ``pcm``: the samples as they are; ``wav``: the streamed WAV header (``wav.py``), then PCM;
- ``mp3``: raw MPEG-2 layer III frames (libmp3lame, no ID3 tag, no Xing frame);
- ``flac``: native FLAC (``fLaC`` + STREAMINFO with unknown length), 20 ms blocks;
- ``aac``: AAC-LC in ADTS (FFmpeg's native encoder).

``supported_formats()`` says which of these this FFmpeg build can encode. ``time_stretch``
changes the tempo (0.25..4.0) without the pitch through FFmpeg's ``atempo`` filter, chained
for factors beyond 0.5..2.0; 1.0 is the identity, with no filter at all.
"""

from __future__ import annotations

import fractions
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

import av
import numpy as np

from gateway.http.wav import wav_header
from gateway.media.opus_codec import SAMPLE_RATE

FORMATS = ("pcm", "wav", "mp3", "flac", "aac")
MIN_SPEED, MAX_SPEED = 0.25, 4.0
_TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)


class PcmStage(Protocol):
    def write(self, pcm: bytes) -> bytes: ...
    def flush(self) -> bytes: ...


class UnsupportedFormat(ValueError):
    def __init__(self, fmt: str, supported: frozenset[str]) -> None:
        self.format, self.supported = fmt, supported
        super().__init__(f"format {fmt!r} is not supported here; use one of {sorted(supported)}")


@dataclass(frozen=True, slots=True)
class _Spec:
    muxer: str
    codec: str
    bit_rate: int = 0
    codec_options: dict[str, str] = field(default_factory=dict)
    muxer_options: dict[str, str] = field(default_factory=dict)


_SPECS = {
    "mp3": _Spec(
        "mp3", "libmp3lame", 64_000, muxer_options={"id3v2_version": "0", "write_xing": "0"}
    ),
    "flac": _Spec(
        "flac",
        "flac",
        codec_options={"frame_size": "480"},
        muxer_options={"metadata_header_padding": "0"},
    ),
    "aac": _Spec("adts", "aac", 64_000),
}


@cache
def supported_formats() -> frozenset[str]:
    """The formats of ``FORMATS`` this build can produce (pcm and wav need no encoder)."""
    return frozenset({"pcm", "wav"} | {fmt for fmt, spec in _SPECS.items() if _has(spec)})


def open_encoder(fmt: str) -> PcmStage:
    """A fresh incremental encoder; raises ``UnsupportedFormat`` naming the supported ones."""
    if fmt not in supported_formats():
        raise UnsupportedFormat(fmt, supported_formats())
    if fmt == "pcm":
        return PcmPassthrough()
    if fmt == "wav":
        return PcmPassthrough(prefix=wav_header())
    return ContainerEncoder(_SPECS[fmt])


def time_stretch(speed: float) -> PcmStage:
    """PCM -> PCM at ``speed`` times the tempo; the identity (no filter) at 1.0."""
    if not MIN_SPEED <= speed <= MAX_SPEED:
        raise ValueError(f"speed must be {MIN_SPEED}..{MAX_SPEED}, got {speed}")
    return PcmPassthrough() if speed == 1.0 else TimeStretch(speed)


def atempo_factors(speed: float) -> list[float]:
    """``speed`` as a product of factors each within 0.5..2.0 (atempo's range in old FFmpeg)."""
    factors = []
    while speed > 2.0:
        factors.append(2.0)
        speed /= 2.0
    while speed < 0.5:
        factors.append(0.5)
        speed /= 0.5
    return [*factors, speed]


class Pipeline:
    """Stages in order: each ``write``/``flush`` output feeds the next."""

    def __init__(self, *stages: PcmStage) -> None:
        self._stages = stages

    def write(self, pcm: bytes) -> bytes:
        for stage in self._stages:
            pcm = stage.write(pcm)
        return pcm

    def flush(self) -> bytes:
        data = b""
        for stage in self._stages:
            data = stage.write(data) + stage.flush()
        return data


class PcmPassthrough:
    def __init__(self, prefix: bytes = b"") -> None:
        self._prefix = prefix

    def write(self, pcm: bytes) -> bytes:
        out, self._prefix = self._prefix + pcm, b""
        return out

    def flush(self) -> bytes:
        return self.write(b"")


class _Frames:
    """Whole s16 samples out of any byte chunking, as PyAV frames with running pts."""

    def __init__(self) -> None:
        self._odd = b""
        self._pts = 0

    def frame(self, pcm: bytes) -> av.AudioFrame | None:
        data = self._odd + pcm
        cut = len(data) & ~1
        self._odd = data[cut:]
        if not cut:
            return None
        samples = np.frombuffer(data[:cut], dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = SAMPLE_RATE, self._pts, _TIME_BASE
        self._pts += samples.shape[1]
        return frame


class ContainerEncoder:
    """An FFmpeg encoder + muxer writing into a non-seekable sink that is drained per call."""

    def __init__(self, spec: _Spec) -> None:
        self._sink = ChunkSink()
        options = {"flush_packets": "1", **spec.muxer_options}
        self._container = av.open(self._sink, "w", format=spec.muxer, container_options=options)
        self._stream = self._container.add_stream(spec.codec, rate=SAMPLE_RATE, layout="mono")
        if spec.bit_rate:
            self._stream.codec_context.bit_rate = spec.bit_rate
        self._stream.codec_context.options = dict(spec.codec_options)
        self._frames = _Frames()
        self._closed = False

    def write(self, pcm: bytes) -> bytes:
        if self._closed:
            raise RuntimeError("encoder already flushed")
        frame = self._frames.frame(pcm)
        if frame is not None:
            self._container.mux(self._stream.encode(frame))
        return self._sink.drain()

    def flush(self) -> bytes:
        if not self._closed:
            self._closed = True
            self._container.mux(self._stream.encode(None))
            self._container.close()
        return self._sink.drain()


class TimeStretch:
    """``atempo`` filter graph, s16 mono 24 kHz in and out, fed and drained per call."""

    def __init__(self, speed: float) -> None:
        self._graph = av.filter.Graph()
        src = self._graph.add_abuffer(
            format="s16", sample_rate=SAMPLE_RATE, layout="mono", time_base=_TIME_BASE
        )
        chain = [self._graph.add("atempo", f"{factor:.6f}") for factor in atempo_factors(speed)]
        chain.append(
            self._graph.add(
                "aformat", f"sample_fmts=s16:channel_layouts=mono:sample_rates={SAMPLE_RATE}"
            )
        )
        self._sink = self._graph.add("abuffersink")
        for a, b in zip([src, *chain], [*chain, self._sink], strict=True):
            a.link_to(b)
        self._graph.configure()
        self._src = src
        self._frames = _Frames()
        self._closed = False

    def write(self, pcm: bytes) -> bytes:
        if self._closed:
            raise RuntimeError("time stretch already flushed")
        frame = self._frames.frame(pcm)
        if frame is not None:
            self._src.push(frame)
        return self._pull()

    def flush(self) -> bytes:
        if self._closed:
            return b""
        self._closed = True
        self._src.push(None)
        return self._pull()

    def _pull(self) -> bytes:
        out = []
        while True:
            try:
                frame = self._sink.pull()
            except (BlockingIOError, EOFError):
                return b"".join(out)
            out.append(frame.to_ndarray().astype("<i2", copy=False).tobytes())


def open_pipeline(fmt: str, speed: float = 1.0) -> PcmStage:
    """``time_stretch(speed)`` then ``open_encoder(fmt)``."""
    encoder = open_encoder(fmt)
    return encoder if speed == 1.0 else Pipeline(time_stretch(speed), encoder)


class ChunkSink:
    """A non-seekable file for an FFmpeg muxer: what it writes, ``drain``ed as bytes."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._chunks.append(bytes(data))
        return len(data)

    def seekable(self) -> bool:
        return False

    def drain(self) -> bytes:
        out = b"".join(self._chunks)
        self._chunks.clear()
        return out


def _has(spec: _Spec) -> bool:
    try:
        av.Codec(spec.codec, "w")
    except ValueError:  # av.codec.codec.UnknownCodecError: this build has no such encoder
        return False
    return spec.muxer in av.formats_available
