"""The receive fast path (issue 28): a connected session's SRTP RTP taken straight from the
shared UDP socket's read loop, with no queue and no task switch.

aiortc's way, per datagram: the mux -> aioice's ``StunProtocol.datagram_received`` (which first
tries to parse it as STUN: an exception per RTP packet) -> ``Connection.data_received`` -> its
queue -> a wake-up of the DTLS transport's receive task (``RTCDtlsTransport.__run``:
``_recv_next`` -> ``Connection.recv`` -> ``recvfrom``) -> SRTP unprotect -> ``_handle_rtp_data``
-> ``RtpPacket.parse`` -> the router -> ``RTCRtpReceiver._handle_rtp_packet`` (our tap's async
wrapper, then aiortc's coroutine). Here, for an audio receiver whose packets only our tap
consumes (``tap_rtp`` with ``bypass_decoder``: the gateway's uplink), the mux's
``MuxEndpoint.fast_receive`` does the same work synchronously:

- SRTP unprotect with the transport's own rx session (``_rx_srtp``: the same replay window, so a
  replayed or forged datagram is dropped exactly as aiortc drops it);
- the RTP header read by ``parse_rtp`` (the fields the router, the receiver statistics and the
  tap read; aiortc's ``RtpPacket.parse`` checks, its header extensions skipped, not decoded:
  nothing on this path reads them -- checked at install), routed by the transport's
  ``RtpRouter``;
- the tap, then what aiortc's ``_handle_rtp_packet`` still does that matters for audio with the
  decoder bypassed: the active SSRCs and the receiver-report statistics (``StreamStatistics``,
  what its RTCP task reports). There is no NACK generator nor bitrate estimator for audio
  (checked at install), and the jitter buffer is ``_DiscardJitterBuffer``;
- the transport's received counters (``getStats``).

SRTCP goes to the session's SRTCP fast path when it has one (rtcp_fast.py, installed first),
else aiortc's way. Everything else -- STUN, DTLS, a datagram while aioice's queue still holds
earlier ones (order: a packet never overtakes one queued before the fast path was installed), a
transport not connected -- keeps aiortc's path. Private names used here are checked by
``_rx_fast_problems`` (check_internals).
"""

from __future__ import annotations

import asyncio
import struct
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aioice.ice
import aiortc.rtcdtlstransport
import aiortc.rtcrtpreceiver
import pylibsrtp
from aiortc import RTCDtlsTransport, RTCIceTransport, RTCRtpReceiver
from aiortc.clock import current_datetime
from aiortc.rtcdtlstransport import RtpRouter
from aiortc.rtp import RtpPacket

from gateway.aiortc_compat._common import _MUX_ENDPOINTS, _ice_connection, _missing_names
from gateway.aiortc_compat.dtls import srtp_unprotector
from gateway.aiortc_compat.rtcp_fast import (
    _CONNECTED,
    _RX_BYTES,
    _RX_PACKETS,
    FAST_RTCP,
    fast_rtcp_refusal,
)
from gateway.aiortc_compat.rtp_taps import _RECEIVER_JITTER_BUFFER, RTP_TAP, _DiscardJitterBuffer

_NTP_OFFSET_S = 2_208_988_800  # 1900 -> 1970: aiortc's ``clock.current_ms`` counts from 1900

_DTLS_ATTRS = ("_rx_srtp", "_state", "_transport", "_rtp_router", "_rtp_header_extensions_map",
               _RX_BYTES, _RX_PACKETS)
_KIND = "_RTCRtpReceiver__kind"
_CODECS = "_RTCRtpReceiver__codecs"
_STREAMS = "_RTCRtpReceiver__remote_streams"
_ACTIVE_SSRC = "_RTCRtpReceiver__active_ssrc"
_NACK_GENERATOR = "_RTCRtpReceiver__nack_generator"
_BITRATE_ESTIMATOR = "_RTCRtpReceiver__remote_bitrate_estimator"
_RECEIVER_ATTRS = ("_enabled", _KIND, _CODECS, _STREAMS, _ACTIVE_SSRC, _NACK_GENERATOR,
                   _BITRATE_ESTIMATOR, _RECEIVER_JITTER_BUFFER)
#: An SSRC's "last packet" time for aiortc's ``getSynchronizationSources`` is refreshed at
#: most this often (a ``datetime`` per packet was a few µs on the loop's cold caches; the
#: sources it reports are those of the last 10 s)
ACTIVE_SSRC_EVERY_S = 0.1
_HEADER = struct.Struct("!BBHLL")  # (aiortc's RTP header layout)
_HEADER_LENGTH = 12
#: What an aiortc ``RtpPacket`` carries; ``RtpFields`` has the part of it the fast path's
#: readers read (check_internals: aiortc's router and receiver statistics read no other)
_PACKET_ATTRS = frozenset(vars(RtpPacket()))


class RtpFields:
    """An RTP packet as the fast path hands it on: the fields aiortc's ``RtpRouter.route_rtp``
    and ``StreamStatistics.add`` and our tap read, under ``RtpPacket``'s names. No header
    extensions: aiortc's parse decodes them into a ``HeaderExtensions`` for every packet (a
    browser sends mid and audio level in each), which nothing on this path reads."""

    __slots__ = ("marker", "padding_size", "payload", "payload_type", "sequence_number", "ssrc",
                 "timestamp")

    def __init__(self, marker: int, payload_type: int, sequence_number: int, timestamp: int,
                 ssrc: int, payload: bytes, padding_size: int) -> None:
        self.marker = marker
        self.payload_type = payload_type
        self.sequence_number = sequence_number
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.payload = payload
        self.padding_size = padding_size


def parse_rtp(data: bytes) -> RtpFields:
    """``data``'s RTP header and payload, refused (ValueError) as aiortc's
    ``RtpPacket.parse`` refuses them: too short, not version 2, a truncated CSRC list or
    extension, a bad padding length. The CSRCs and the extension are stepped over."""
    if len(data) < _HEADER_LENGTH:
        raise ValueError("RTP packet length is less than 12 bytes")
    first, m_pt, seq, timestamp, ssrc = _HEADER.unpack_from(data)
    if first >> 6 != 2:
        raise ValueError("RTP packet has invalid version")
    pos = _HEADER_LENGTH + 4 * (first & 0x0F)
    size = len(data)
    if size < pos:
        raise ValueError("RTP packet has truncated CSRC")
    if first & 0x10:
        if size < pos + 4:
            raise ValueError("RTP packet has truncated extension profile / length")
        pos += 4 + 4 * ((data[pos + 2] << 8) | data[pos + 3])
        if size < pos:
            raise ValueError("RTP packet has truncated extension value")
    padding = 0
    if first & 0x20:
        padding = data[-1]
        if not padding or padding > size - pos:
            raise ValueError("RTP packet padding length is invalid")
        payload = data[pos:-padding]
    else:
        payload = data[pos:]
    return RtpFields(m_pt >> 7, m_pt & 0x7F, seq, timestamp, ssrc, payload, padding)


def _rx_fast_problems() -> list[str]:
    """check_internals' part for this module: the names above, and that aiortc's receive path
    still does what the fast path repeats (the names its code uses)."""
    problems = _missing_names(RTCDtlsTransport.__init__, _DTLS_ATTRS, "RTCDtlsTransport.{}")
    problems += _missing_names(
        getattr(RTCDtlsTransport, "_recv_next", None),
        ("_rx_srtp", "unprotect", "_handle_rtp_data", "is_rtcp", _RX_BYTES, _RX_PACKETS),
        "RTCDtlsTransport._recv_next no longer uses {}",
    )
    problems += _missing_names(
        getattr(RTCDtlsTransport, "_handle_rtp_data", None),
        ("parse", "_rtp_header_extensions_map", "_rtp_router", "route_rtp",
         "_handle_rtp_packet"),
        "RTCDtlsTransport._handle_rtp_data no longer uses {}",
    )
    problems += _missing_names(RTCRtpReceiver.__init__, _RECEIVER_ATTRS, "RTCRtpReceiver.{}")
    problems += _missing_names(
        getattr(RTCRtpReceiver, "_handle_rtp_packet", None),
        ("_enabled", _ACTIVE_SSRC, _CODECS, _STREAMS, "StreamStatistics", "add",
         _NACK_GENERATOR, _BITRATE_ESTIMATOR, _RECEIVER_JITTER_BUFFER),
        "RTCRtpReceiver._handle_rtp_packet no longer uses {}",
    )
    if not callable(getattr(aiortc.rtcrtpreceiver, "StreamStatistics", None)):
        problems.append("aiortc.rtcrtpreceiver.StreamStatistics")
    else:  # what they read of a packet, ``RtpFields`` has
        readers = (("RtpRouter.route_rtp", getattr(RtpRouter, "route_rtp", None)),
                   ("StreamStatistics.add",
                    getattr(aiortc.rtcrtpreceiver.StreamStatistics, "add", None)))
        for label, func in readers:
            used = set(getattr(getattr(func, "__code__", None), "co_names", ()))
            problems += [f"{label} reads RtpPacket.{name}, not in RtpFields"
                         for name in sorted((used & _PACKET_ATTRS) - set(RtpFields.__slots__))]
    problems += _missing_names(getattr(aioice.ice.Connection, "data_received", None),
                               ("_queue",),
                               "aioice.Connection.data_received no longer queues to {}")
    problems += _missing_names(RTCIceTransport.__init__, ("_connection",),
                               "RTCIceTransport.{}")
    return problems


#: Another receiver's packets handed to aiortc's handler (a task each, kept until done)
_FOREIGN: set[asyncio.Future[None]] = set()


@dataclass
class FastReceiveStats:
    """One session's fast path (``WebRtcLeg.state()`` -> ``rx_fast``)."""

    packets: int = 0  # RTP handed to the tap from the read loop
    queued_behind: int = 0  # left to aiortc: its queue still held earlier datagrams (order)
    srtp_dropped: int = 0  # unprotect refused them (a replay, failed authentication): dropped
    malformed: int = 0  # not parseable as RTP once unprotected: dropped (as aiortc does)
    unrouted: int = 0  # no receiver for its SSRC / payload type: dropped (as aiortc does)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def fast_receive_refusal(receiver: RTCRtpReceiver) -> str | None:
    """Why ``receive_rtp_directly`` would not install on ``receiver`` (None: it would)."""
    transport = receiver.transport
    if transport is None:
        return "transport not connected"
    # connected, SRTP keyed, on the shared socket, not impaired: what the SRTCP path needs too
    refusal = fast_rtcp_refusal(transport)
    if refusal is not None:
        return refusal
    for name in _DTLS_ATTRS:
        if not hasattr(transport, name):
            return f"RTCDtlsTransport has no {name}"
    for name in _RECEIVER_ATTRS:
        if not hasattr(receiver, name):
            return f"RTCRtpReceiver has no {name}"
    if getattr(receiver, _KIND) != "audio":
        return "not an audio receiver"
    if getattr(receiver, _NACK_GENERATOR) is not None:
        return "aiortc generates NACKs for this receiver"
    if getattr(receiver, _BITRATE_ESTIMATOR) is not None:
        return "aiortc estimates this receiver's bitrate"
    if not isinstance(getattr(receiver, _RECEIVER_JITTER_BUFFER), _DiscardJitterBuffer):
        return "aiortc's decoder is in use (tap_rtp without bypass_decoder)"
    if vars(receiver).get(RTP_TAP) is None:
        return "no RTP tap"
    if transport._rtp_router.receivers - {receiver}:
        return "the transport has other receivers"
    return None


def receive_rtp_directly(receiver: RTCRtpReceiver) -> FastReceiveStats | None:
    """Take ``receiver``'s SRTP RTP from the shared socket's read loop (see the module's doc).

    Call once the transport is connected (SRTP keys set) and after ``tap_rtp``: at the
    connection's "connected" state change, before aiortc registers the receiver with the
    transport's router, is fine -- until then the router routes nowhere and the datagram is
    dropped, as aiortc's own path drops it; a receiver of another kind registered since is
    given its packets aiortc's way (its ``_handle_rtp_packet``, in a task). Returns the
    path's counters, or None when it does not apply (``fast_receive_refusal`` says why): then
    nothing changed. The callback is removed when the endpoint closes (the session's ICE
    close), or by ``stop_receiving_directly``; it holds the session's objects weakly."""
    if fast_receive_refusal(receiver) is not None:
        return None
    transport = receiver.transport
    connection_vars = vars(_ice_connection(transport))
    endpoints = connection_vars[_MUX_ENDPOINTS]
    stats = FastReceiveStats()
    callback = _fast_receive(transport, receiver, stats, connection_vars.get(FAST_RTCP))
    for endpoint in endpoints:
        endpoint.fast_receive = callback
    return stats


def stop_receiving_directly(transport: RTCDtlsTransport) -> None:
    """Remove the RTP fast path from every shared-socket endpoint of ``transport``'s ICE agent
    (its SRTCP fast path, if any, stays)."""
    connection = getattr(transport.transport, "_connection", None)
    connection_vars = vars(connection) if connection is not None else {}
    for endpoint in connection_vars.get(_MUX_ENDPOINTS, ()):
        endpoint.fast_receive = connection_vars.get(FAST_RTCP)


def _fast_receive(
    transport: RTCDtlsTransport, receiver: RTCRtpReceiver, stats: FastReceiveStats,
    rtcp: Callable[[bytes], bool] | None,
) -> Callable[[bytes], bool]:
    """The endpoint's callback (SRTCP handed to ``rtcp``, the session's SRTCP fast path). It
    holds the transport and receiver weakly (the endpoint is reachable from them: a strong
    reference would be a reference cycle per session), and reads the tap per packet (it
    reaches the session: the same)."""
    transport_ref = weakref.ref(transport)
    receiver_ref = weakref.ref(receiver)
    session = transport._rx_srtp
    unprotect = srtp_unprotector(session)
    codecs: dict[int, Any] = getattr(receiver, _CODECS)
    streams: dict[int, Any] = getattr(receiver, _STREAMS)
    active: dict[int, Any] = getattr(receiver, _ACTIVE_SSRC)
    statistics = aiortc.rtcrtpreceiver.StreamStatistics
    now = time.time
    srtp_error = pylibsrtp.Error
    stamp: list[Any] = [0.0, None]  # [when, current_datetime() then]: for ``active``

    def fast_receive(data: bytes) -> bool:
        # SRTP/SRTCP only (128..191, aiortc's test); SRTCP (``is_rtcp``: 192..208) to ``rtcp``
        if len(data) < 2:
            return False
        first = data[0]
        if first < 128 or first > 191:
            return False
        if 192 <= data[1] <= 208:
            return rtcp is not None and rtcp(data)
        dtls = transport_ref()
        rtp_receiver = receiver_ref()
        if dtls is None or rtp_receiver is None or dtls._state is not _CONNECTED:
            return False
        if dtls._rx_srtp is not session:  # (aiortc never re-keys; if it did: its own path)
            return False
        if dtls._transport._connection._queue.qsize():
            stats.queued_behind += 1  # earlier datagrams first: aiortc's task takes this too
            return False
        counters = vars(dtls)  # (its getStats counters, name-mangled: no getattr / setattr)
        counters[_RX_BYTES] += len(data)
        counters[_RX_PACKETS] += 1
        t = now()
        arrival_ms = int((t + _NTP_OFFSET_S) * 1000)  # as aiortc's clock.current_ms()
        try:
            clear = unprotect(data)
        except srtp_error:
            stats.srtp_dropped += 1
            return True
        try:
            packet = parse_rtp(clear)
        except ValueError:
            stats.malformed += 1
            return True
        target = dtls._rtp_router.route_rtp(packet)
        if target is None:
            stats.unrouted += 1
            return True
        if target is not rtp_receiver:  # (not at install: a receiver added since) aiortc's way
            full = RtpPacket.parse(clear, dtls._rtp_header_extensions_map)
            task = asyncio.ensure_future(
                target._handle_rtp_packet(full, arrival_time_ms=arrival_ms))
            _FOREIGN.add(task)
            task.add_done_callback(_FOREIGN.discard)
            return True
        tap = vars(rtp_receiver).get(RTP_TAP)
        if tap is not None:
            tap(packet, arrival_ms)
        stats.packets += 1
        if not rtp_receiver._enabled:
            return True
        ssrc = packet.ssrc
        if t - stamp[0] >= ACTIVE_SSRC_EVERY_S or ssrc not in active:
            stamp[0], stamp[1] = t, current_datetime()
        active[ssrc] = stamp[1]
        codec = codecs.get(packet.payload_type)
        if codec is None:
            return True
        stream = streams.get(ssrc)
        if stream is None:
            stream = streams[ssrc] = statistics(codec.clockRate)
        stream.add(packet)  # what aiortc's receiver reports (RTCP RR) are made of
        return True

    return fast_receive
