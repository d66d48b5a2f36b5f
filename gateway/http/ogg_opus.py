"""An incremental Ogg/Opus muxer for the gateway's pre-encoded 20 ms Opus packets.

Every packet is muxed byte-identical (no re-encode) into a page of its own, and ``write``
returns that page at once: one 20 ms packet in, one whole page out (RFC 3533 pages, RFC 7845
Ogg Opus mapping).

- ``header()``: the OpusHead page (BOS; version 1, mono, input sample rate 24000, pre-skip
  312 = the encoder's 6.5 ms look-ahead at 48 kHz, gain 0, mapping family 0) and the OpusTags
  page, each with granule position 0.
- ``write(packet)``: one page holding the packet; its granule position is the count of 48 kHz
  samples of all packets so far, pre-skip included (RFC 7845 §4), read from each packet's TOC
  (RFC 6716 §3.1), so 960 per 20 ms packet.
- ``close()``: an empty EOS page carrying the last granule position: every audio page went
  out when it was written, so the end of stream gets a page of its own (as libogg does).

Why not libavformat's ogg muxer: it holds the newest page back until the next one (or the
trailer) exists, so that it can set EOS on the last page: with ``page_duration=20000`` the
page of packet n comes out of the ``mux`` call of packet n+1, i.e. one frame (20 ms at live
pace, a whole synthesis gap at the end of a burst) late, and PyAV exposes no
``av_write_frame(NULL)`` flush to force it out. Its pages are otherwise byte-identical to
these (the unit tests compare them against a bit-exact libavformat stream).
"""

from __future__ import annotations

import secrets
import struct
import zlib
from collections.abc import Sequence

from gateway.media.opus_codec import (
    CHANNELS,
    ENCODER_LOOKAHEAD_SAMPLES,
    RTP_CLOCK_RATE,
    SAMPLE_RATE,
)

MEDIA_TYPE = "audio/ogg"
GRANULE_RATE = RTP_CLOCK_RATE  # Ogg Opus granule positions always count 48 kHz samples
PRE_SKIP = ENCODER_LOOKAHEAD_SAMPLES * GRANULE_RATE // SAMPLE_RATE  # 312
VENDOR = "voice-gateway"
MAX_PACKET_BYTES = 254 * 255 + 254  # the most one page's 255 lacing values can hold (65024)
MAX_PACKET_SAMPLES = 5_760  # 120 ms at 48 kHz, RFC 6716 §3.2.5

_FLAG_BOS = 0x02
_FLAG_EOS = 0x04
_PAGE_HEADER = struct.Struct("<4sBBqIIIB")  # capture, version, flags, granule, serial, seq, crc, n
_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def ogg_crc(data: bytes) -> int:
    """RFC 3533's CRC-32: polynomial 0x04C11DB7, MSB first, initial value 0, no final XOR.

    Computed by zlib (the reflected CRC-32 of the same polynomial) on bit-reversed bytes, with
    zlib's initial and final inversions undone, then bit-reversed back: C speed, no table.
    """
    reflected = zlib.crc32(data.translate(_REVERSED_BITS), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)


def opus_head(
    *, pre_skip: int = PRE_SKIP, input_sample_rate: int = SAMPLE_RATE, channels: int = CHANNELS
) -> bytes:
    """The 19-byte identification header (RFC 7845 §5.1), channel mapping family 0."""
    return b"OpusHead" + struct.pack("<BBHIhB", 1, channels, pre_skip, input_sample_rate, 0, 0)


def opus_tags(vendor: str = VENDOR, comments: Sequence[str] = ()) -> bytes:
    """The comment header (RFC 7845 §5.2): vendor string and ``KEY=value`` comments."""
    out = [b"OpusTags", _lv(vendor.encode()), struct.pack("<I", len(comments))]
    out += [_lv(comment.encode()) for comment in comments]
    return b"".join(out)


def packet_samples(packet: bytes) -> int:
    """Duration of one Opus packet in 48 kHz samples, from its TOC byte (RFC 6716 §3.1)."""
    if not packet:
        raise ValueError("an Opus packet has at least its TOC byte")
    config, code = packet[0] >> 3, packet[0] & 0x3
    if config < 12:  # SILK-only: 10, 20, 40, 60 ms
        frame = (480, 960, 1920, 2880)[config & 0x3]
    elif config < 16:  # hybrid: 10, 20 ms
        frame = (480, 960)[config & 0x1]
    else:  # CELT-only: 2.5, 5, 10, 20 ms
        frame = (120, 240, 480, 960)[config & 0x3]
    if code == 0:
        count = 1
    elif code in (1, 2):
        count = 2
    elif len(packet) < 2:
        raise ValueError("an Opus code-3 packet needs its frame count byte")
    else:
        count = packet[1] & 0x3F
    samples = frame * count
    if not 0 < samples <= MAX_PACKET_SAMPLES:
        raise ValueError(f"an Opus packet lasts 2.5..120 ms, this one {samples / 48:g} ms")
    return samples


def ogg_page(payload: bytes, *, granule: int, serial: int, sequence: int, flags: int = 0) -> bytes:
    """One page holding one whole packet (or none: ``payload`` empty)."""
    if len(payload) > MAX_PACKET_BYTES:
        raise ValueError(f"one page holds at most {MAX_PACKET_BYTES} bytes, got {len(payload)}")
    full, last = divmod(len(payload), 255)
    lacing = b"\xff" * full + bytes([last]) if payload else b""
    header = _PAGE_HEADER.pack(b"OggS", 0, flags, granule, serial, sequence, 0, len(lacing))
    page = bytearray(header + lacing + payload)
    struct.pack_into("<I", page, 22, ogg_crc(page))
    return bytes(page)


class OggOpusWriter:
    """Ogg/Opus pages for one logical stream, one page per packet, as soon as it is written."""

    def __init__(
        self,
        *,
        serial: int | None = None,
        pre_skip: int = PRE_SKIP,
        vendor: str = VENDOR,
        comments: Sequence[str] = (),
    ) -> None:
        self.serial = secrets.randbits(32) if serial is None else serial
        self._head = opus_head(pre_skip=pre_skip)
        self._tags = opus_tags(vendor, comments)
        self._sequence = 0
        self._granule = 0
        self._started = False
        self._closed = False

    @property
    def granule(self) -> int:
        """The granule position of the last page out (48 kHz samples, pre-skip included)."""
        return self._granule

    def header(self) -> bytes:
        """The OpusHead (BOS) and OpusTags pages; ``write`` emits them first if never taken."""
        if self._started:
            raise RuntimeError("the Ogg/Opus header pages were already written")
        self._started = True
        return self._page(self._head, _FLAG_BOS) + self._page(self._tags)

    def write(self, packet: bytes) -> bytes:
        """The page holding ``packet``, byte-identical, with the granule position after it."""
        if self._closed:
            raise RuntimeError("the Ogg/Opus stream is closed")
        samples = packet_samples(packet)  # validates before any state changes
        if len(packet) > MAX_PACKET_BYTES:
            raise ValueError(f"an Opus packet this large ({len(packet)} bytes) fits no page")
        head = b"" if self._started else self.header()
        self._granule += samples
        return head + self._page(packet)

    def close(self) -> bytes:
        """The empty EOS page ending the stream (after the header, if it never went out)."""
        if self._closed:
            return b""
        head = b"" if self._started else self.header()
        self._closed = True
        return head + self._page(b"", _FLAG_EOS)

    def _page(self, payload: bytes, flags: int = 0) -> bytes:
        page = ogg_page(
            payload,
            granule=self._granule,
            serial=self.serial,
            sequence=self._sequence,
            flags=flags,
        )
        self._sequence += 1
        return page


def _lv(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data
