"""RFC 4585 §6.2.1 generic NACK (RTCP RTPFB, PT=205, FMT=1): encode and decode.

Wire format of one NACK packet::

    |V=2|P| FMT=1 |   PT=205      |          length               |
    |                  SSRC of packet sender                        |
    |                  SSRC of media source                         |
    |            PID                |             BLP               |  (one or more FCI entries)

Each FCI entry asks for ``PID`` and for ``PID + i + 1`` for every bit ``i`` set in ``BLP`` (bit 0 is
the least significant), all modulo 2**16 — unlike aiortc 1.16, which does not wrap past 65535.

Parsed sequence numbers come back deduplicated in order of first appearance (entry by entry, PID
first, then BLP bits from least to most significant); that is oldest-first for any packet built by
:func:`build_nack_fci`. Every decoding failure raises :class:`MalformedRtcp` (a ``ValueError``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from gateway.rtp.rtcp_error import MalformedRtcp
from gateway.rtp.seqnum import SEQ_MASK, SEQ_MOD, seq_diff

RTCP_VERSION = 2
PT_RTPFB = 205
FMT_GENERIC_NACK = 1
_HEADER = struct.Struct("!BBHII")  # V/P/FMT, PT, length, sender SSRC, media SSRC
_ENTRY = struct.Struct("!HH")
_BLP_SPAN = 16


@dataclass(frozen=True, slots=True)
class NackPacket:
    sender_ssrc: int
    media_ssrc: int
    seqs: list[int]


def parse_nack_fci(fci: bytes) -> list[int]:
    """Decode NACK FCI entries into deduplicated sequence numbers (first-appearance order)."""
    if len(fci) % _ENTRY.size:
        raise MalformedRtcp(f"NACK FCI length {len(fci)} is not a multiple of 4")
    seen: set[int] = set()
    out: list[int] = []
    for pid, blp in _ENTRY.iter_unpack(fci):
        if pid not in seen:
            seen.add(pid)
            out.append(pid)
        bit = 0
        while blp:
            if blp & 1:
                seq = (pid + bit + 1) & SEQ_MASK
                if seq not in seen:
                    seen.add(seq)
                    out.append(seq)
            blp >>= 1
            bit += 1
    return out


def wrap_order(seqs: Iterable[int]) -> list[int]:
    """Deduplicate and order sequence numbers oldest first, wrap-aware.

    The circle of sequence space is cut at the widest gap between the numbers, so
    ``[1, 65535, 0]`` orders as ``[65535, 0, 1]``. Raises ``ValueError`` on values outside 0..65535.
    """
    values = sorted(set(seqs))
    if not values:
        return []
    if values[0] < 0 or values[-1] > SEQ_MASK:
        raise ValueError("sequence numbers must be in 0..65535")
    # Gap after values[i] to the next value, going round the circle.
    widest_gap = values[0] + SEQ_MOD - values[-1]
    start = 0
    for i in range(1, len(values)):
        gap = values[i] - values[i - 1]
        if gap > widest_gap:
            widest_gap, start = gap, i
    return values[start:] + values[:start]


def build_nack_fci(seqs: Iterable[int]) -> bytes:
    """Pack sequence numbers (any order, duplicates allowed, may wrap) into PID+BLP entries.

    Entries are emitted oldest first (see :func:`wrap_order`); the greedy packing is minimal
    whenever some gap between requested numbers exceeds 16, i.e. in every practical case.
    """
    ordered = wrap_order(seqs)
    out = bytearray()
    pid: int | None = None
    blp = 0
    for seq in ordered:
        if pid is not None:
            offset = seq_diff(seq, pid)
            if 1 <= offset <= _BLP_SPAN:
                blp |= 1 << (offset - 1)
                continue
            out += _ENTRY.pack(pid, blp)
        pid, blp = seq, 0
    if pid is not None:
        out += _ENTRY.pack(pid, blp)
    return bytes(out)


def iter_rtcp_packets(data: bytes) -> Iterator[bytes]:
    """Split a compound RTCP datagram into its packets by their length fields (no other parsing)."""
    pos = 0
    while pos < len(data):
        if len(data) - pos < 4:
            raise MalformedRtcp("truncated RTCP header")
        if data[pos] >> 6 != RTCP_VERSION:
            raise MalformedRtcp(f"RTCP version {data[pos] >> 6} != 2")
        size = (int.from_bytes(data[pos + 2 : pos + 4], "big") + 1) * 4
        if pos + size > len(data):
            raise MalformedRtcp("RTCP length field runs past the datagram")
        yield data[pos : pos + size]
        pos += size


def is_nack(packet: bytes) -> bool:
    """Cheap check of the first two bytes: an RTPFB generic NACK (it may still be malformed)."""
    return len(packet) >= 2 and packet[1] == PT_RTPFB and packet[0] & 0x1F == FMT_GENERIC_NACK


def parse_nack_packet(packet: bytes) -> NackPacket:
    """Decode one complete RTCP generic NACK packet (exactly one packet: the length must match)."""
    if len(packet) < _HEADER.size + _ENTRY.size:
        raise MalformedRtcp(f"NACK packet too short ({len(packet)} bytes)")
    first, pt, length, sender_ssrc, media_ssrc = _HEADER.unpack_from(packet)
    if first >> 6 != RTCP_VERSION:
        raise MalformedRtcp(f"RTCP version {first >> 6} != 2")
    if pt != PT_RTPFB or first & 0x1F != FMT_GENERIC_NACK:
        raise MalformedRtcp(f"not a generic NACK (PT={pt}, FMT={first & 0x1F})")
    size = (length + 1) * 4
    if size != len(packet):
        raise MalformedRtcp(f"length field says {size} bytes, packet has {len(packet)}")
    end = size
    if first & 0x20:  # padding: the last octet counts the padding octets, itself included
        pad = packet[-1]
        if pad == 0 or pad % 4 or size - pad < _HEADER.size + _ENTRY.size:
            raise MalformedRtcp(f"bad RTCP padding count {pad}")
        end -= pad
    return NackPacket(sender_ssrc, media_ssrc, parse_nack_fci(packet[_HEADER.size : end]))


def build_nack_packet(sender_ssrc: int, media_ssrc: int, seqs: Iterable[int]) -> bytes:
    """Encode a complete RTCP generic NACK packet (no padding). ``seqs`` must not be empty."""
    for ssrc in (sender_ssrc, media_ssrc):
        if not 0 <= ssrc <= 0xFFFFFFFF:
            raise ValueError(f"SSRC {ssrc} out of 32-bit range")
    fci = build_nack_fci(seqs)
    if not fci:
        raise ValueError("a NACK needs at least one sequence number")
    length = (_HEADER.size + len(fci)) // 4 - 1
    header = _HEADER.pack(
        (RTCP_VERSION << 6) | FMT_GENERIC_NACK, PT_RTPFB, length, sender_ssrc, media_ssrc
    )
    return header + fci
