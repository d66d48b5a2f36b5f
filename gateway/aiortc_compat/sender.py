"""The batch send path's reach into aiortc: the sender's RTP context and SR counters, and a
synchronous SRTP-protect-and-send on the nominated ICE pair (``direct_rtp_sender``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aioice.candidate
import aioice.ice
import aioice.stun
import aiortc.rtcdtlstransport
import aiortc.rtcrtpsender
from aiortc import (
    RTCDtlsTransport,
    RTCRtpSender,
)

from gateway.aiortc_compat._common import _ice_connection, _require
from gateway.aiortc_compat.dtls import srtp_protector

_SENDER_EXTENSIONS = "_RTCRtpSender__rtp_header_extensions_map"


# --- sender: the batch send path (one task sends every stream's due frames) ------------------


def sender_rtp_context(sender: RTCRtpSender) -> tuple[str | None, Any]:
    """The sender's negotiated mid and RTP header-extension map (valid once it has started)."""
    _require(sender, "_RTCRtpSender__mid")
    _require(sender, _SENDER_EXTENSIONS)
    return sender._RTCRtpSender__mid, getattr(sender, _SENDER_EXTENSIONS)  # type: ignore[attr-defined]


def note_rtp_sent(
    sender: RTCRtpSender, rtp_timestamp: int, ntp_timestamp: int, octets: int
) -> None:
    """Keep the counters aiortc's RTCP sender reports are built from, for packets we sent."""
    sender._RTCRtpSender__ntp_timestamp = ntp_timestamp  # type: ignore[attr-defined]
    sender._RTCRtpSender__rtp_timestamp = rtp_timestamp  # type: ignore[attr-defined]
    sender._RTCRtpSender__octet_count += octets  # type: ignore[attr-defined]
    sender._RTCRtpSender__packet_count += 1  # type: ignore[attr-defined]



def direct_rtp_sender(transport: RTCDtlsTransport) -> Callable[[bytes], bool] | None:
    """A function that SRTP-protects and sends one serialized RTP packet synchronously (no
    await, no task switch) on the transport's nominated ICE pair, returning False, having sent
    nothing, once that is no longer possible (transport not connected, socket closed).

    None when it is not possible at all: not connected yet, or the nominated pair is not a
    plain UDP socket (a TURN relay) -- the caller then uses the async path (``send_rtp_packet``).
    The pair, socket and SRTP session are looked up once, not per packet.
    """
    _require(transport, "_tx_srtp")
    if transport.state != "connected":
        return None
    connection = _ice_connection(transport)
    _require(connection, "_nominated")
    pair = connection._nominated.get(1)
    if pair is None or type(pair.protocol) is not aioice.ice.StunProtocol:
        return None
    udp = pair.protocol.transport
    if udp is None:
        return None
    protect = srtp_protector(transport._tx_srtp)
    sendto = _datagram_sender(udp)
    is_closing = udp.is_closing
    addr = pair.remote_addr
    _require(transport, "_state")
    connected = aiortc.rtcdtlstransport.State.CONNECTED

    nominated = connection._nominated

    def send(data: bytes) -> bool:
        nonlocal pair, sendto, is_closing, addr
        # the enum, not the ``state`` property (which lower-cases the enum's name per call)
        if transport._state is not connected or is_closing():
            return False
        current = nominated.get(1)
        if current is not pair:  # the peer nominated another pair (an ICE restart, say)
            if current is None or type(current.protocol) is not aioice.ice.StunProtocol:
                return False
            udp_now = current.protocol.transport
            if udp_now is None:
                return False
            pair, sendto, is_closing, addr = (current, _datagram_sender(udp_now),
                                              udp_now.is_closing, current.remote_addr)
        sendto(protect(data), addr)
        return True

    return send


def _datagram_sender(udp: Any) -> Callable[[bytes, Any], None]:
    """A shared socket's endpoint batches (the tick's datagrams leave in one ``sendmmsg``)."""
    batched = getattr(udp, "send_batched", None)
    return batched if callable(batched) else udp.sendto  # type: ignore[no-any-return]


def first_sequence_number() -> int:
    """A stream's random first RTP sequence number, drawn the way aiortc's sender draws it (so
    ``fixed_start_sequence`` steers the batch send path too)."""
    return int(aiortc.rtcrtpsender.random_sequence_number())
