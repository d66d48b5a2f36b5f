import struct

import pytest

from gateway.nack.rtcp import MalformedRtcp
from gateway.rtp.rtcp_report import parse_report_blocks


def rr(blocks: list[tuple]) -> bytes:
    body = b"".join(struct.pack("!IIIIII", *b) for b in blocks)
    length = (8 + len(body)) // 4 - 1
    return struct.pack("!BBHI", 0x80 | len(blocks), 201, length, 0xABC) + body


def test_fraction_cumulative_and_rtt():
    ntp_now = (0x12345678 << 16) | 0xFFFF
    lsr, dlsr = 0x12340000, 0x00000100  # our SR 0x5678/65536 s ago; the peer held it 3.9 ms
    packet = rr([(7, (64 << 24) | 0xFFFFFE, 1000, 80, lsr, dlsr)])
    (block,) = parse_report_blocks(packet)
    assert block.ssrc == 7 and block.fraction_lost == 0.25 and block.cumulative_lost == -2
    assert block.rtt_s(ntp_now) == pytest.approx((0x5678 - 0x100) / 65536)
    assert parse_report_blocks(rr([(7, 0, 1, 0, 0, 0)]))[0].rtt_s(ntp_now) is None


def test_malformed():
    with pytest.raises(MalformedRtcp):
        parse_report_blocks(rr([(1, 0, 0, 0, 0, 0)])[:20])


def test_a_negative_rtt_from_clock_noise_is_zero():
    (block,) = parse_report_blocks(rr([(7, 0, 1, 0, 0x12340000, 0x00050000)]))
    assert block.rtt_s(0x12345678 << 16) == 0.0
