"""An incremental Ogg (RFC 3533) reader for one Ogg Opus stream (RFC 7845): bytes in, Opus
packets out, as soon as each page is complete.

``feed(data)`` takes any chunking and returns the audio packets completed so far; the
identification (``OpusHead``) and comment (``OpusTags``) headers are checked and kept
(``head``), not returned. A packet may span pages (lacing value 255 continues it); each page's
CRC is checked. It holds at most one incomplete page (< 65,307 bytes) between feeds and raises
``MalformedOgg`` on anything else (another logical stream, a bad capture pattern or CRC, a
stream that is not Opus); ``close()`` raises when the stream stopped inside a page or before its
headers. The serial number of the first page is the stream's; others are refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gateway.http.ogg_opus import ogg_crc

_PAGE = struct.Struct("<4sBBqIIIB")  # capture, version, flags, granule, serial, seq, crc, count
_FLAG_CONTINUED = 0x01
_FLAG_EOS = 0x04


class MalformedOgg(ValueError):
    """The bytes are not one well-formed Ogg Opus stream."""


@dataclass(frozen=True, slots=True)
class OpusHead:
    channels: int
    pre_skip: int  # 48 kHz samples to drop at the start (the encoder's look-ahead)
    input_sample_rate: int


class OggOpusReader:
    def __init__(self) -> None:
        self._buf = bytearray()
        self._serial: int | None = None
        self._partial = bytearray()  # a packet continued on the next page
        self._headers = 0
        self.head: OpusHead | None = None
        self.pages = 0
        self.ended = False  # the EOS page was read

    def feed(self, data: bytes) -> list[bytes]:
        """The audio packets completed by ``data``, in order."""
        self._buf += data
        out: list[bytes] = []
        pos = 0
        while (page := self._page(pos)) is not None:
            packets, pos = page
            for packet in packets:
                if self._headers < 2:
                    self._header(packet)
                else:
                    out.append(packet)
        del self._buf[:pos]
        return out

    def close(self) -> None:
        if self._buf or self._partial:
            raise MalformedOgg("the stream stopped inside a page or a packet")
        if self._headers < 2:
            raise MalformedOgg("the stream stopped before its Opus headers")

    def _page(self, pos: int) -> tuple[list[bytes], int] | None:
        buf = self._buf
        if len(buf) - pos < _PAGE.size:
            if bytes(buf[pos : pos + 4]) and not b"OggS".startswith(bytes(buf[pos : pos + 4])):
                raise MalformedOgg("no Ogg capture pattern")
            return None
        capture, version, flags, _, serial, _, crc, count = _PAGE.unpack_from(buf, pos)
        if capture != b"OggS" or version != 0:
            raise MalformedOgg("no Ogg capture pattern (or an unknown version)")
        lacing_at = pos + _PAGE.size
        if len(buf) < lacing_at + count:
            return None
        lacing = buf[lacing_at : lacing_at + count]
        end = lacing_at + count + sum(lacing)
        if len(buf) < end:
            return None
        page = bytearray(buf[pos:end])
        page[22:26] = b"\0\0\0\0"
        if ogg_crc(bytes(page)) != crc:
            raise MalformedOgg("page CRC mismatch")
        if self._serial is None:
            self._serial = serial
        elif serial != self._serial:
            raise MalformedOgg("a second logical stream (chained or multiplexed Ogg)")
        if not flags & _FLAG_CONTINUED:
            self._partial.clear()
        self.pages += 1
        self.ended = bool(flags & _FLAG_EOS)
        packets: list[bytes] = []
        at = lacing_at + count
        for value in lacing:
            self._partial += buf[at : at + value]
            at += value
            if value < 255:
                if self._partial:  # (an empty packet carries nothing to play)
                    packets.append(bytes(self._partial))
                self._partial.clear()
        return packets, end

    def _header(self, packet: bytes) -> None:
        if self._headers == 0:
            if not packet.startswith(b"OpusHead") or len(packet) < 19:
                raise MalformedOgg("the first packet is not OpusHead")
            _, channels, pre_skip, rate = struct.unpack_from("<BBHI", packet, 8)
            self.head = OpusHead(channels, pre_skip, rate)
        elif not packet.startswith(b"OpusTags"):
            raise MalformedOgg("the second packet is not OpusTags")
        self._headers += 1
