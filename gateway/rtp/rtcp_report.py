"""RFC 3550 §6.4 receiver report blocks (in SR, PT 200, and RR, PT 201): what a receiver says
about our stream -- loss, jitter, and with LSR/DLSR the round-trip time.

Report block (24 bytes)::

    SSRC of source | fraction lost (8) cumulative lost (24, signed) | extended highest seq |
    interarrival jitter | LSR (middle 32 bits of the NTP time of our last SR) | DLSR (1/65536 s)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gateway.rtp.rtcp_error import MalformedRtcp

PT_SR, PT_RR = 200, 201
_BLOCK = struct.Struct("!IIIIII")


@dataclass(frozen=True, slots=True)
class ReportBlock:
    ssrc: int
    fraction_lost: float  # 0..1, since the previous report
    cumulative_lost: int
    highest_seq: int
    jitter: int  # RTP clock ticks
    lsr: int
    dlsr: int

    def rtt_s(self, ntp_now: int) -> float | None:
        """Round-trip time from this block (``ntp_now``: our 64-bit NTP time on arrival)."""
        if self.lsr == 0:
            return None
        middle = (ntp_now >> 16) & 0xFFFFFFFF
        rtt = (middle - self.lsr - self.dlsr) & 0xFFFFFFFF
        if rtt & 0x80000000:  # clock noise put it below zero
            return 0.0
        return rtt / 65536


def is_report(packet: bytes) -> bool:
    return len(packet) >= 2 and packet[1] in (PT_SR, PT_RR)


def parse_report_blocks(packet: bytes) -> list[ReportBlock]:
    """The report blocks of one SR or RR packet."""
    if len(packet) < 8 or packet[1] not in (PT_SR, PT_RR):
        raise MalformedRtcp("not an SR/RR packet")
    count = packet[0] & 0x1F
    start = 8 + (20 if packet[1] == PT_SR else 0)
    if start + count * _BLOCK.size > len(packet):
        raise MalformedRtcp("report blocks run past the packet")
    blocks = []
    for k in range(count):
        ssrc, lost, seq, jitter, lsr, dlsr = _BLOCK.unpack_from(packet, start + k * _BLOCK.size)
        cumulative = lost & 0xFFFFFF
        if cumulative & 0x800000:
            cumulative -= 0x1000000
        blocks.append(ReportBlock(ssrc, (lost >> 24) / 256, cumulative, seq, jitter, lsr, dlsr))
    return blocks
