"""RTCP datagrams for the fuzz tests: valid NACKs, other packet types, lying lengths, padding."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from gateway.nack.rtcp import build_nack_packet

MEDIA_SSRC = 0x1234  # the stream the fuzzed Retransmitter sends (tests/fuzz/test_fuzz_rtcp.py)

ssrc = st.one_of(st.sampled_from([0, 1, MEDIA_SSRC, 0xFFFFFFFF]), st.integers(0, 0xFFFFFFFF))
seq = st.one_of(
    st.integers(0, 0xFFFF),
    st.integers(65_500, 65_535),  # near the wrap
    st.integers(0, 40),
)


@st.composite
def wrapping_seqs(draw: st.DrawFn, max_size: int = 60) -> list[int]:
    """Sequence numbers clustered round a base (often just below 65535), any order, dupes."""
    base = draw(st.one_of(st.integers(65_400, 65_535), st.integers(0, 0xFFFF)))
    spread = draw(st.sampled_from([17, 40, 200, 0x8000, 0x10000]))
    offsets = draw(st.lists(st.integers(0, spread - 1), min_size=1, max_size=max_size))
    return [(base + off) & 0xFFFF for off in offsets]


seq_list = st.one_of(wrapping_seqs(), st.lists(seq, min_size=1, max_size=40))
packet_seqs = st.one_of(wrapping_seqs(max_size=20), st.lists(seq, min_size=1, max_size=12))


def header(first: int, pt: int, length: int) -> bytes:
    return struct.pack("!BBH", first & 0xFF, pt & 0xFF, length & 0xFFFF)


@st.composite
def nack_packet(draw: st.DrawFn) -> bytes:
    sender = draw(ssrc)
    media = draw(st.one_of(st.just(MEDIA_SSRC), ssrc))
    return build_nack_packet(sender, media, draw(packet_seqs))


@st.composite
def padded_nack(draw: st.DrawFn) -> bytes:
    """A NACK with the P bit, 4n padding octets, the last one counting them (maybe wrongly)."""
    packet = draw(nack_packet())
    words = draw(st.integers(1, 4))
    count = draw(st.one_of(st.just(words * 4), st.integers(0, 255)))
    pad = bytes(words * 4 - 1) + bytes([count])
    body = bytearray(packet + pad)
    body[0] |= 0x20
    body[2:4] = struct.pack("!H", len(body) // 4 - 1)
    return bytes(body)


@st.composite
def other_packet(draw: st.DrawFn) -> bytes:
    """SR/RR/SDES/BYE/APP/other RTPFB/PSFB (PLI, FIR, REMB) with a correct length field."""
    pt = draw(st.sampled_from([200, 201, 202, 203, 204, 205, 206, 207, 192, 0, 255]))
    fmt = draw(st.integers(0, 31))
    words = draw(st.integers(0, 12))
    body = draw(st.binary(min_size=words * 4, max_size=words * 4))
    padding = draw(st.booleans())
    return header(0x80 | (0x20 if padding else 0) | fmt, pt, words) + body


@st.composite
def lying_packet(draw: st.DrawFn) -> bytes:
    """A real packet whose header lies: length, version, P bit or FMT/PT changed, or cut."""
    packet = bytearray(draw(st.one_of(nack_packet(), other_packet(), padded_nack())))
    how = draw(st.sampled_from(["length", "version", "padding", "fmt", "pt", "cut", "extend"]))
    if how == "length":
        packet[2:4] = struct.pack("!H", draw(st.integers(0, 0xFFFF)))
    elif how == "version":
        packet[0] = (packet[0] & 0x3F) | (draw(st.integers(0, 3)) << 6)
    elif how == "padding":
        packet[0] ^= 0x20
        packet[-1] = draw(st.integers(0, 255))
    elif how == "fmt":
        packet[0] = (packet[0] & 0xE0) | draw(st.integers(0, 31))
    elif how == "pt":
        packet[1] = draw(st.sampled_from([205, 206, 200, 0]))
    elif how == "cut":
        del packet[draw(st.integers(0, len(packet))) :]
    else:
        packet += draw(st.binary(min_size=1, max_size=9))
    return bytes(packet)


rtcp_packet = st.one_of(nack_packet(), padded_nack(), other_packet(), lying_packet())


@st.composite
def compound(draw: st.DrawFn) -> bytes:
    """One datagram: packets back to back, sometimes with garbage after or cut short."""
    data = b"".join(draw(st.lists(rtcp_packet, min_size=1, max_size=4)))
    tail = draw(st.sampled_from(["none", "none", "garbage", "cut"]))
    if tail == "garbage":
        data += draw(st.binary(min_size=1, max_size=8))
    elif tail == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
    return data


rtcp_datagram = st.one_of(compound(), st.binary(max_size=1500), rtcp_packet)


def bitflip(data: bytes, position: int, bit: int) -> bytes:
    if not data:
        return data
    out = bytearray(data)
    out[position % len(out)] ^= 1 << (bit & 7)
    return bytes(out)
