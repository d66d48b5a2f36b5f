"""Bytes on the wire of what a client receives: RTP datagrams counted before the in-process
impairment drops any (first transmissions, RED and retransmissions alike; SRTP's tag included,
UDP/IP headers not), and the RTCP it sends (NACKs, receiver reports)."""

from __future__ import annotations

from typing import Any

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient


def _is_rtp(data: bytes) -> bool:
    return len(data) >= 12 and 128 <= data[0] <= 191 and not 192 <= data[1] <= 223


class WireBytes:
    """Install after ``connect()`` (outside the client's own impairment)."""

    def __init__(self, client: GatewayClient) -> None:
        self.rtp_in = 0
        self.rtp_packets_in = 0
        self.rtcp_out = 0
        transport = client.transceiver.receiver.transport
        aiortc_compat.impair_incoming(transport, self._wrap_in)
        aiortc_compat.impair_outgoing(transport, self._wrap_out)

    def _wrap_in(self, deliver: aiortc_compat.Deliver) -> aiortc_compat.Deliver:
        def count(data: bytes, addr: Any) -> None:
            if _is_rtp(data):
                self.rtp_in += len(data)
                self.rtp_packets_in += 1
            deliver(data, addr)

        return count

    def _wrap_out(self, sendto: aiortc_compat.Deliver) -> aiortc_compat.Deliver:
        def count(data: bytes, addr: Any) -> None:
            if len(data) >= 2 and 128 <= data[0] <= 191 and 192 <= data[1] <= 223:
                self.rtcp_out += len(data)
            sendto(data, addr)

        return count

    def as_dict(self) -> dict[str, int]:
        return {"rtp_bytes_in": self.rtp_in, "rtp_packets_in": self.rtp_packets_in,
                "rtcp_bytes_out": self.rtcp_out}
