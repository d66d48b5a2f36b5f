"""The receive fast path's RTP header reader (``aiortc_compat.parse_rtp``) against aiortc's
``RtpPacket.parse``: the same fields for every packet aiortc accepts (CSRCs, header
extensions, padding), refused where aiortc refuses; and aiortc's readers of a packet on that
path read nothing ``RtpFields`` lacks."""

from __future__ import annotations

import struct

import pytest
from aiortc.rtcdtlstransport import RtpRouter
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtcrtpreceiver import StreamStatistics
from aiortc.rtp import HeaderExtensionsMap, RtpPacket
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.aiortc_compat import RtpFields, check_internals, parse_rtp
from gateway.aiortc_compat.rx_fast import _rx_fast_problems

FIELDS = ("marker", "payload_type", "sequence_number", "timestamp", "ssrc", "payload",
          "padding_size")


def header(*, marker: int = 0, pt: int = 111, seq: int = 7, ts: int = 960, ssrc: int = 1234,
           csrcs: tuple[int, ...] = (), extension: bytes | None = None, padding: int = 0,
           version: int = 2) -> bytes:
    first = (version << 6) | ((padding > 0) << 5) | ((extension is not None) << 4) | len(csrcs)
    out = struct.pack("!BBHLL", first, (marker << 7) | pt, seq, ts, ssrc)
    out += b"".join(struct.pack("!L", c) for c in csrcs)
    if extension is not None:
        out += struct.pack("!HH", 0xBEDE, len(extension) // 4) + extension
    return out


def same(data: bytes) -> None:
    ours = parse_rtp(data)
    theirs = RtpPacket.parse(data, extensions_map())
    for name in FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert type(ours.payload) is bytes


def extensions_map() -> HeaderExtensionsMap:
    extensions = HeaderExtensionsMap()
    extensions.configure(RTCRtpParameters(headerExtensions=[
        RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:ssrc-audio-level"),
        RTCRtpHeaderExtensionParameters(id=4, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
    ]))
    return extensions


def test_plain_packet() -> None:
    same(header() + b"\x78\x01\x02")
    same(header(marker=1, pt=63, seq=65535, ts=0xFFFFFFFF, ssrc=0xFFFFFFFF) + b"")


def test_csrcs_extension_padding() -> None:
    # a browser's packet: one-byte extensions (audio level 1, mid 4), padded to a word
    extension = bytes([0x10, 0x85, 0x40, ord("0")])
    same(header(csrcs=(1, 2, 3), extension=extension) + b"opus")
    same(header(extension=extension, padding=4) + b"opus" + b"\x00\x00\x00\x04")
    same(header(extension=b"") + b"x")
    assert parse_rtp(header(extension=extension) + b"opus").payload == b"opus"


@pytest.mark.parametrize("data", [
    b"\x80\x6f\x00",  # shorter than a header
    header(version=1) + b"x",
    header(csrcs=(1, 2))[:-4],  # a CSRC cut off
    header(extension=b"")[:-2],  # the extension's length cut off
    header(extension=b"\x10\x85\x40\x30")[:-1],  # its value cut off
    header(padding=1) + b"\x00",  # padding length 0
    header(padding=9) + b"ab\x09",  # longer than the payload
])
def test_refused_as_aiortc_refuses(data: bytes) -> None:
    with pytest.raises(ValueError):
        RtpPacket.parse(data, extensions_map())
    with pytest.raises(ValueError):
        parse_rtp(data)


@settings(max_examples=400, deadline=None)
@given(st.binary(min_size=0, max_size=64))
def test_any_bytes(data: bytes) -> None:
    """Accepted by both, or by neither; the same fields when accepted. (aiortc also decodes
    the extension's values, which may refuse a packet ours takes: not generated here, the
    extension bit is cleared.)"""
    if data:
        data = bytes([data[0] & ~0x10]) + data[1:]
    try:
        theirs = RtpPacket.parse(data)
    except ValueError:
        with pytest.raises(ValueError):
            parse_rtp(data)
        return
    ours = parse_rtp(data)
    for name in FIELDS:
        assert getattr(ours, name) == getattr(theirs, name), name


def test_router_and_statistics_take_it() -> None:
    """aiortc's router and receiver statistics read only what ``RtpFields`` has (the
    check_internals part), and do with it what they do with a parsed packet."""
    assert _rx_fast_problems() == [] and check_internals() == []
    data = header(seq=100, ts=48_000) + b"opus"
    stats_ours, stats_theirs = StreamStatistics(48_000), StreamStatistics(48_000)
    stats_ours.add(parse_rtp(data))
    stats_theirs.add(RtpPacket.parse(data))
    assert (stats_ours.max_seq, stats_ours.packets_received) == \
        (stats_theirs.max_seq, stats_theirs.packets_received) == (100, 1)
    router = RtpRouter()
    receiver = object()
    router.register_receiver(receiver, ssrcs=[], payload_types=[111])  # type: ignore[arg-type]
    assert router.route_rtp(parse_rtp(data)) is receiver
    assert isinstance(parse_rtp(data), RtpFields)
