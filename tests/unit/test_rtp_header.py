import random

import pytest
from aiortc import clock
from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
from aiortc.rtp import HeaderExtensionsMap, RtpPacket

from gateway.rtp.header import (
    RtpHeaderTemplate,
    abs_send_time,
    ntp_now,
    rewrite,
)

MID = "urn:ietf:params:rtp-hdrext:sdes:mid"
AST = "http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"


def extension_map(*uris_ids: tuple[str, int]) -> HeaderExtensionsMap:
    m = HeaderExtensionsMap()
    m.configure(
        RTCRtpParameters(
            headerExtensions=[RTCRtpHeaderExtensionParameters(id=i, uri=u) for u, i in uris_ids]
        )
    )
    return m


def aiortc_bytes(m, pt, ssrc, mid, seq, ts, ast, payload) -> bytes:
    packet = RtpPacket(
        payload_type=pt, marker=1, sequence_number=seq, timestamp=ts, ssrc=ssrc, payload=payload
    )
    packet.extensions.abs_send_time = ast
    packet.extensions.mid = mid
    return packet.serialize(m)


@pytest.mark.parametrize(
    "extensions, mid",
    [
        (((MID, 1), (AST, 3)), "0"),  # Chromium's ids: one-byte form
        (((AST, 2), (MID, 9)), "audio"),  # other order and ids
        (((MID, 4), (AST, 15)), "0"),  # id 15: two-byte form
        (((MID, 1), (AST, 3)), "a-mid-longer-than-16-bytes"),  # two-byte form by length
        (((MID, 1),), "0"),  # no abs-send-time negotiated
        ((), None),  # no extensions at all
    ],
)
def test_packets_are_byte_identical_to_aiortcs(extensions, mid):
    m = extension_map(*extensions)
    rng = random.Random(7)
    ssrc = rng.getrandbits(32)
    template = RtpHeaderTemplate.from_aiortc(111, ssrc, m, mid)
    for _ in range(200):
        seq, ts, ast = rng.getrandbits(16), rng.getrandbits(32), rng.getrandbits(24)
        payload = rng.randbytes(rng.randrange(1, 200))
        ours = template.build(seq, ts, ast.to_bytes(3, "big"), payload)
        assert ours == aiortc_bytes(m, 111, ssrc, mid, seq, ts, ast, payload)
    assert template.has_abs_send_time == any(uri == AST for uri, _ in extensions)


def test_parsed_back_by_aiortc():
    m = extension_map((MID, 1), (AST, 3))
    template = RtpHeaderTemplate.from_aiortc(96, 0xDEADBEEF, m, "0")
    packet = RtpPacket.parse(template.build(65535, 2**32 - 1, b"\x12\x34\x56", b"opus"), m)
    assert (packet.sequence_number, packet.timestamp, packet.ssrc) == (65535, 2**32 - 1, 0xDEADBEEF)
    assert packet.payload_type == 96 and packet.marker == 1 and packet.payload == b"opus"
    assert packet.extensions.mid == "0" and packet.extensions.abs_send_time == 0x123456


def test_rewrite_keeps_the_header_and_swaps_seq_timestamp_payload():
    m = extension_map((MID, 1), (AST, 3))
    original = aiortc_bytes(m, 111, 42, "0", 100, 96_000, 0xABCDEF, b"speech frame")
    copy = rewrite(original, len(b"speech frame"), 90, 86_400, b"\x68")
    assert copy == aiortc_bytes(m, 111, 42, "0", 90, 86_400, 0xABCDEF, b"\x68")


def test_not_an_rtp_header_is_refused():
    with pytest.raises(ValueError):
        RtpHeaderTemplate(b"\x00" * 12, None)
    with pytest.raises(ValueError):
        RtpHeaderTemplate(b"\x80" + b"\x00" * 11, 5)  # abs-send-time inside the fixed header


def test_ntp_and_abs_send_time_match_aiortcs_clock():
    ours = ntp_now()
    theirs = clock.current_ntp_time()
    assert abs(theirs - ours) < 2**32 // 10  # within 100 ms (two clock reads)
    assert ntp_now(lambda: 0.0) == 2_208_988_800 << 32  # the Unix epoch in NTP
    assert abs_send_time(1 << 32) == 1 << 18  # one second in 6.18 fixed point
    assert abs_send_time(0xFFFF_FFFF_FFFF_FFFF) == 0xFFFFFF
