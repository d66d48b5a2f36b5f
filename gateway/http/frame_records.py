"""The gateway's framed Opus stream (``application/vnd.voice-gateway.opus-frames``), version 2.

The media path's 20 ms Opus packets, each as written by the encoder, with the sequence number
and timestamp RTP would give them, for our own client and the web page. All integers are
unsigned big-endian.

Stream header, 14 bytes, once at the start::

    magic         4 bytes   b"VGOF"
    version       u8        2
    sample_rate   u32       24000 (the Opus encoder's input rate)
    frame_ms      u16       20
    channels      u8        1
    pre_skip      u16       312: samples at 48 kHz to drop from the decoded start (the
                            encoder's lookahead; an OpusHead's pre-skip, RFC 7845 section 5.1)

Version 1 streams (12 bytes: no ``pre_skip``) are still parsed; their header's ``pre_skip`` is
None (the encoder is the same: 312 applies).

Then records, each starting with a type byte::

    frame  0x01   sequence u16, timestamp u32, length u16, then ``length`` Opus bytes
                  (1..1275: one packet). ``sequence`` is +1 per frame (mod 2**16);
                  ``timestamp`` is RTP-style on a 48 kHz clock, +960 per 20 ms frame
                  (mod 2**32). Both may start anywhere.
    end    0x02   nothing more: the stream ended normally.
    error  0x03   length u16, then ``length`` bytes (1..4096) of UTF-8 JSON
                  ``{"code": str, "message": str}``: the stream ended on this error.

    word   0x04   length u16, then ``length`` bytes (1..4096) of UTF-8 JSON ``{"word": str,
                  "start_ms": number, "end_ms": number}``: when a word of the speech plays,
                  in ms from the stream's first sample. Written only to a client that asked
                  (``"words": true``): readers from before it refuse the type.

An end or error record is the last thing in the stream: a stream that stops before one is
truncated. The parser holds at most one incomplete record (< 4099 bytes) between feeds, and
raises ``MalformedStream`` (only that) on anything else; once it has, it stays failed.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import Any

from gateway.http.ogg_opus import PRE_SKIP
from gateway.media.opus_codec import (
    CHANNELS,
    FRAME_MS,
    MAX_PACKET_BYTES,
    RTP_TICKS_PER_FRAME,
    SAMPLE_RATE,
)

MEDIA_TYPE = "application/vnd.voice-gateway.opus-frames"
MAGIC = b"VGOF"
VERSION = 2
MAX_ERROR_BYTES = 4096

TYPE_FRAME = 0x01
TYPE_END = 0x02
TYPE_ERROR = 0x03
TYPE_WORD = 0x04

_HEADERS = {1: struct.Struct(">4sBIHB"), 2: struct.Struct(">4sBIHBH")}  # by version: parsed
_HEADER = _HEADERS[VERSION]  # written
HEADER_BYTES = {version: layout.size for version, layout in _HEADERS.items()}  # 12, 14
_FRAME = struct.Struct(">BHIH")  # 9 bytes before the Opus bytes
_ERROR = struct.Struct(">BH")  # 3 bytes before the JSON


class MalformedStream(ValueError):
    """The bytes are not a well-formed frame-record stream (or it stopped early)."""


@dataclass(frozen=True, slots=True)
class StreamHeader:
    version: int = VERSION
    sample_rate: int = SAMPLE_RATE
    frame_ms: int = FRAME_MS
    channels: int = CHANNELS
    pre_skip: int | None = PRE_SKIP  # None: a version 1 stream, which does not say


@dataclass(frozen=True, slots=True)
class FrameRecord:
    sequence: int
    timestamp: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class EndRecord:
    pass


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class WordRecord:
    word: str
    start_ms: float
    end_ms: float


Record = StreamHeader | FrameRecord | EndRecord | ErrorRecord | WordRecord


def encode_header(header: StreamHeader = StreamHeader()) -> bytes:
    if header.version != VERSION or header.pre_skip is None:
        raise ValueError(f"only version {VERSION} headers, with a pre-skip, are written")
    return _HEADER.pack(MAGIC, header.version, header.sample_rate, header.frame_ms,
                        header.channels, header.pre_skip)


def encode_frame(sequence: int, timestamp: int, payload: bytes) -> bytes:
    if not 1 <= len(payload) <= MAX_PACKET_BYTES:
        raise ValueError(f"a frame carries 1..{MAX_PACKET_BYTES} bytes, got {len(payload)}")
    return (
        _FRAME.pack(TYPE_FRAME, sequence & 0xFFFF, timestamp & 0xFFFFFFFF, len(payload)) + payload
    )


def encode_end() -> bytes:
    return bytes([TYPE_END])


def encode_error(code: str, message: str) -> bytes:
    """An error record; an over-long message is cut (at a character) to fit 4096 bytes."""
    if len(_error_json(code, "")) > MAX_ERROR_BYTES:
        raise ValueError("error code too long for an error record")
    body = _error_json(code, message)
    while len(body) > MAX_ERROR_BYTES:
        message = message[: max(0, len(message) - (len(body) - MAX_ERROR_BYTES) - 1)]
        body = _error_json(code, message)
    return _ERROR.pack(TYPE_ERROR, len(body)) + body


def encode_word(word: str, start_ms: float, end_ms: float) -> bytes:
    """A word record; a word too long for one (4096 bytes of JSON) is cut at a character."""
    body = _word_json(word, start_ms, end_ms)
    while len(body) > MAX_ERROR_BYTES:
        word = word[: max(0, len(word) - (len(body) - MAX_ERROR_BYTES) - 1)]
        body = _word_json(word, start_ms, end_ms)
    return _ERROR.pack(TYPE_WORD, len(body)) + body


def _word_json(word: str, start_ms: float, end_ms: float) -> bytes:
    return json.dumps({"word": word, "start_ms": start_ms, "end_ms": end_ms},
                      ensure_ascii=False).encode()


class FrameRecordEncoder:
    """The stream for one response: the header first, then numbered frames, then end/error."""

    def __init__(self, *, sequence: int = 0, timestamp: int = 0) -> None:
        self._sequence = sequence & 0xFFFF
        self._timestamp = timestamp & 0xFFFFFFFF
        self._started = False
        self._ended = False

    def header(self) -> bytes:
        """The stream header; ``frame``/``end``/``error`` emit it first if never taken."""
        if self._started:
            raise RuntimeError("the stream header was already written")
        self._started = True
        return encode_header()

    def frame(self, payload: bytes) -> bytes:
        """A frame record, advancing the sequence number by 1 and the timestamp by 960."""
        return self.frames([payload])

    def frames(self, payloads: list[bytes]) -> bytes:
        """``frame`` of each, joined (one call for a write's worth of frames)."""
        sequence, timestamp = self._sequence, self._timestamp
        records = [  # validates them all before any state changes
            encode_frame(sequence + k, timestamp + k * RTP_TICKS_PER_FRAME, payload)
            for k, payload in enumerate(payloads)
        ]
        head = self._open()
        self._sequence = (sequence + len(payloads)) & 0xFFFF
        self._timestamp = (timestamp + len(payloads) * RTP_TICKS_PER_FRAME) & 0xFFFFFFFF
        return head + b"".join(records)

    def word(self, word: str, start_ms: float, end_ms: float) -> bytes:
        record = encode_word(word, start_ms, end_ms)
        return self._open() + record

    def end(self) -> bytes:
        head = self._open()
        self._ended = True
        return head + encode_end()

    def error(self, code: str, message: str) -> bytes:
        record = encode_error(code, message)
        head = self._open()
        self._ended = True
        return head + record

    def _open(self) -> bytes:
        if self._ended:
            raise RuntimeError("the stream already ended")
        return b"" if self._started else self.header()


class FrameRecordParser:
    """Incremental parser: feed any chunking, get the complete records so far."""

    def __init__(self, *, max_frame_bytes: int = MAX_PACKET_BYTES) -> None:
        self._buf = bytearray()
        self._max_frame = max_frame_bytes
        self._header: StreamHeader | None = None
        self._next_sequence: int | None = None
        self._done = False
        self._failed: MalformedStream | None = None

    @property
    def header(self) -> StreamHeader | None:
        return self._header

    @property
    def done(self) -> bool:
        """True once the end or error record was parsed."""
        return self._done

    @property
    def buffered(self) -> int:
        """Bytes held of a record not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Record]:
        """The records completed by ``data`` (the stream header first, once)."""
        if self._failed is not None:
            raise MalformedStream(f"stream already failed: {self._failed}")
        self._buf += data
        records: list[Record] = []
        pos = 0
        try:
            while (got := self._record(pos)) is not None:
                record, pos = got
                records.append(record)
        except MalformedStream as exc:
            self._failed = exc
            self._buf.clear()
            raise
        del self._buf[:pos]
        return records

    def close(self) -> None:
        """At the end of input: raises if the stream stopped before its end or error record."""
        if self._failed is not None:
            raise MalformedStream(f"stream already failed: {self._failed}")
        if not self._done:
            raise MalformedStream(f"truncated stream ({len(self._buf)} bytes of a record)")

    def _record(self, pos: int) -> tuple[Record, int] | None:
        buf = self._buf
        if self._header is None:
            return self._parse_header(pos)
        if self._done or pos >= len(buf):
            if pos < len(buf):
                raise MalformedStream("bytes after the stream's end record")
            return None
        kind = buf[pos]
        if kind == TYPE_FRAME:
            if len(buf) - pos < _FRAME.size:
                return None
            _, sequence, timestamp, length = _FRAME.unpack_from(buf, pos)
            if not 1 <= length <= self._max_frame:
                raise MalformedStream(f"frame length {length} outside 1..{self._max_frame}")
            if self._next_sequence is not None and sequence != self._next_sequence:
                raise MalformedStream(f"frame {sequence} where {self._next_sequence} was due")
            end = pos + _FRAME.size + length
            if len(buf) < end:
                return None
            self._next_sequence = (sequence + 1) & 0xFFFF
            return FrameRecord(sequence, timestamp, bytes(buf[end - length : end])), end
        if kind == TYPE_END:
            self._done = True
            return EndRecord(), pos + 1
        if kind == TYPE_WORD:
            if len(buf) - pos < _ERROR.size:
                return None
            _, length = _ERROR.unpack_from(buf, pos)
            if not 1 <= length <= MAX_ERROR_BYTES:
                raise MalformedStream(f"word record length {length} outside 1..{MAX_ERROR_BYTES}")
            end = pos + _ERROR.size + length
            if len(buf) < end:
                return None
            return _parse_word(bytes(buf[end - length : end])), end
        if kind == TYPE_ERROR:
            if len(buf) - pos < _ERROR.size:
                return None
            _, length = _ERROR.unpack_from(buf, pos)
            if not 1 <= length <= MAX_ERROR_BYTES:
                raise MalformedStream(f"error record length {length} outside 1..{MAX_ERROR_BYTES}")
            end = pos + _ERROR.size + length
            if len(buf) < end:
                return None
            self._done = True
            return _parse_error(bytes(buf[end - length : end])), end
        raise MalformedStream(f"unknown record type 0x{kind:02x}")

    def _parse_header(self, pos: int) -> tuple[Record, int] | None:
        buf = self._buf
        have = bytes(buf[pos : pos + len(MAGIC)])
        if not MAGIC.startswith(have):
            raise MalformedStream("not a voice-gateway opus-frames stream (bad magic)")
        if len(buf) - pos <= len(MAGIC):
            return None
        version = buf[pos + len(MAGIC)]
        layout = _HEADERS.get(version)
        if layout is None:
            raise MalformedStream(f"unsupported stream version {version}")
        if len(buf) - pos < layout.size:
            return None
        _, _, rate, frame_ms, channels, *rest = layout.unpack_from(buf, pos)
        pre_skip = rest[0] if rest else None
        if rate == 0 or frame_ms == 0 or channels not in (1, 2):
            raise MalformedStream(f"bad stream header ({rate} Hz, {frame_ms} ms, {channels} ch)")
        self._header = StreamHeader(version, rate, frame_ms, channels, pre_skip)
        return self._header, pos + layout.size


def _error_json(code: str, message: str) -> bytes:
    return json.dumps({"code": code, "message": message}, ensure_ascii=False).encode()


def _parse_error(body: bytes) -> ErrorRecord:
    try:
        value: Any = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedStream(f"error record is not UTF-8 JSON: {exc}") from None
    if not (
        isinstance(value, dict)
        and isinstance(value.get("code"), str)
        and isinstance(value.get("message"), str)
    ):
        raise MalformedStream('error record is not {"code": str, "message": str}')
    return ErrorRecord(value["code"], value["message"])


def _parse_word(body: bytes) -> WordRecord:
    try:
        value: Any = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise MalformedStream(f"word record is not UTF-8 JSON: {exc}") from None
    if not (isinstance(value, dict) and isinstance(value.get("word"), str)
            and all(isinstance(value.get(k), int | float) and not isinstance(value.get(k), bool)
                    for k in ("start_ms", "end_ms"))):
        raise MalformedStream('word record is not {"word": str, "start_ms", "end_ms": number}')
    return WordRecord(value["word"], float(value["start_ms"]), float(value["end_ms"]))
