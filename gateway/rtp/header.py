"""A stream's RTP header, built once and patched per packet.

Every packet of one of our streams has the same header but for three fields: sequence number,
timestamp and the abs-send-time extension (SSRC, payload type, marker, the mid extension and the
extension block's layout never change). Building an aiortc ``RtpPacket`` and serializing it per
packet (extension map lookups, ``pack_header_extensions``, several concatenations) cost ≈2.6 µs;
here a packet is one ``struct`` pack and one join.

The template is made by aiortc's own serializer (``RtpHeaderTemplate.from_aiortc``), so the bytes
are exactly what aiortc would send for the negotiated extension map, whatever order or form
(one- or two-byte) it uses; where abs-send-time sits is found by serializing twice.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from aiortc.rtp import HeaderExtensionsMap, RtpPacket

NTP_EPOCH_OFFSET = 2_208_988_800  # seconds from 1900-01-01 (NTP) to 1970-01-01 (Unix)
_SEQ_TS = struct.Struct("!HI")


def ntp_now(now: Callable[[], float] = time.time) -> int:
    """The 64-bit NTP timestamp (32.32 fixed point) of the wall clock, as aiortc's
    ``clock.current_ntp_time`` computes it, without its datetime round trip."""
    return int((now() + NTP_EPOCH_OFFSET) * 4_294_967_296) & 0xFFFF_FFFF_FFFF_FFFF


def abs_send_time(ntp: int) -> int:
    """The 24-bit abs-send-time (6.18 fixed point seconds) of an NTP timestamp."""
    return (ntp >> 14) & 0x00FF_FFFF


def send_stamp() -> tuple[int, int, bytes]:
    """The wall clock as a packet's send time: NTP (the sender report's counters), its
    abs-send-time and that as the header extension's three octets."""
    ntp = ntp_now()
    ast = abs_send_time(ntp)
    return ntp, ast, ast.to_bytes(3, "big")


class RtpHeaderTemplate:
    """Serialized RTP packets of one stream: ``build(seq, timestamp, ast, payload)``."""

    __slots__ = ("_first", "_middle", "_tail", "ast_at", "has_abs_send_time", "header_size",
                 "raw", "second_byte")

    def __init__(self, header: bytes, abs_send_time_at: int | None) -> None:
        if len(header) < 12 or header[0] >> 6 != 2:
            raise ValueError("not an RTP header")
        self.header_size = len(header)
        self.raw = bytes(header)  # the compiled send path patches a copy of these bytes
        self.second_byte = header[1]  # marker bit and payload type
        self.ast_at = -1 if abs_send_time_at is None else abs_send_time_at
        self._first = header[:2]
        self.has_abs_send_time = abs_send_time_at is not None
        if abs_send_time_at is None:
            self._middle, self._tail = header[8:], b""
        else:
            if not 12 < abs_send_time_at <= len(header) - 3:
                raise ValueError("abs-send-time must lie in the extension block")
            self._middle = header[8:abs_send_time_at]
            self._tail = header[abs_send_time_at + 3 :]

    @classmethod
    def from_aiortc(
        cls,
        payload_type: int,
        ssrc: int,
        extensions_map: HeaderExtensionsMap,
        mid: str | None,
        marker: int = 1,
    ) -> RtpHeaderTemplate:
        def serialize(ast: int) -> bytes:
            packet = RtpPacket(payload_type=payload_type, marker=marker, ssrc=ssrc)
            packet.extensions.abs_send_time = ast
            packet.extensions.mid = mid
            return packet.serialize(extensions_map)

        low, high = serialize(0), serialize(0xFFFFFF)
        if low == high:  # abs-send-time not negotiated
            return cls(low, None)
        at = next(i for i in range(len(low)) if low[i] != high[i])
        if high[at : at + 3] != b"\xff\xff\xff" or low[at + 3 :] != high[at + 3 :]:
            raise ValueError("unexpected abs-send-time encoding")
        return cls(low, at)

    def build(self, seq: int, timestamp: int, ast: bytes, payload: bytes) -> bytes:
        """One serialized packet; ``ast`` is the 3-byte abs-send-time (ignored if not
        negotiated)."""
        if self.has_abs_send_time:
            parts = (self._first, _SEQ_TS.pack(seq, timestamp), self._middle, ast, self._tail)
        else:
            parts = (self._first, _SEQ_TS.pack(seq, timestamp), self._middle)
        return b"".join((*parts, payload))


def rewrite(packet: bytes, payload_size: int, seq: int, timestamp: int, payload: bytes) -> bytes:
    """A copy of serialized RTP ``packet`` (no padding, its payload ``payload_size`` bytes) with
    another sequence number, timestamp and payload; every other header field and extension
    kept."""
    header = bytearray(packet[: len(packet) - payload_size])
    _SEQ_TS.pack_into(header, 2, seq, timestamp)
    return bytes(header) + payload
