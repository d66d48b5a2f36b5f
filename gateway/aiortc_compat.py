"""Every use of aiortc's and aioice's private internals, in one place.

aiortc is pinned (``aiortc==1.16.*``). Each function here names the private attribute it
touches; ``check_internals`` verifies they all still exist and tests/test_aiortc_compat.py fails
loudly when an aiortc upgrade moves one. No other module of the gateway reaches into aiortc.

Touched:
- ``RTCRtpSender.__rtp_history``: the sender's retransmission history is replaced by ours
  (``SenderHistory`` of tests/aiortc_track.py, recording into the 5 s frame store by each
  packet's own sequence number; the tests' pull-based track only). aiortc's module-wide
  ``RTP_HISTORY_SIZE`` is left alone, so any other aiortc sender in the process (an in-process
  client's microphone) keeps aiortc's own history.
- ``RTCRtpTransceiver._codecs``: the negotiated codec list, where the answer's Opus fmtp and
  rtcp-fb lines come from (aiortc intersects feedback with the offer and drops ``nack``).
- ``aioice.ice.get_host_addresses``: restrict host candidates to configured addresses (aioice
  always leaves out 127.0.0.1 and has no option for it).
- ``RTCRtpReceiver._handle_rtp_packet`` / ``__jitter_buffer``: raw RTP taps for our own receive
  path (the headless client).
- ``RTCDtlsTransport._handle_rtcp_data`` / ``_send_rtp`` and ``RTCRtpSender._ssrc`` /
  ``__rtp_header_extensions_map``: our NACK responder sees raw RTCP first (aiortc's parser
  mis-reads NACKs across the sequence wrap and ignores misses) and resends stored packets.
- ``RTCIceTransport._connection`` (aioice ``Connection.data_received``, its protocols'
  datagram transports): in-process network impairment of a peer's UDP datagrams.
- ``RTCDtlsTransport._rtp_router.payload_type_table``: a receiver of ours also takes a payload
  type aiortc does not know (RFC 2198 RED, ``accept_payload_type``).
- ``RTCRtpReceiver.__rtcp_ssrc`` and ``RTCDtlsTransport._send_rtp``: our receive path sends its
  own (wrap-safe) RTCP NACKs.
- ``RTCRtpSender.__mid`` / ``__ntp_timestamp`` / ``__rtp_timestamp`` / ``__octet_count`` /
  ``__packet_count``, ``RTCDtlsTransport._tx_srtp`` and aioice ``Connection._nominated``: the
  batch send path builds, protects and sends RTP itself and keeps aiortc's SR counters right.
- ``aiortc.rtcrtpsender.random_sequence_number`` (TEST ONLY, ``fixed_start_sequence``): start a
  stream just below the 65535 -> 0 wrap.
- pylibsrtp ``Session._srtp`` / ``_cdata`` / ``_buffer`` and ``pylibsrtp._binding``: the batch
  path calls libsrtp's ``srtp_protect`` on the session's own buffer (``srtp_protector``).
- ``RTCDtlsTransport._ssl`` / ``_role`` / ``_data_receiver``: ``release_dtls`` swaps the pyOpenSSL
  connection of an established DTLS 1.2 client for a small stand-in (≈100 KB per session).
- aioice ``Connection._check_list`` (through ``RTCIceTransport._connection``) and our own
  instance-level wrappers (``RTCDtlsTransport._handle_rtcp_data`` / ``_send_rtp``,
  ``RTCRtpReceiver._handle_rtp_packet``): ``release_peer_connection`` cuts a closed peer
  connection's reference cycles (session/teardown.py).
- ``aioice.ice.CONSENT_INTERVAL`` / ``CONSENT_FAILURES`` (TEST ONLY, ``consent_timing``): a
  short ICE consent freshness timeout, so tests see a vanished peer reaped in seconds.
- aioice ``Connection._local_username`` / ``_local_password`` / ``_remote_candidates_end``:
  ``restart_ice`` (WHEP's ICE restart; aiortc has none) gives the live ICE connection new
  credentials on both sides in place: its sockets, candidates and nominated pair carry on, DTLS
  and SRTP are untouched.
- aioice ``Connection.query_consent`` (replaced per instance) / ``_query_consent_task`` /
  ``build_request`` / ``_nominated`` / ``remote_password``, ``StunProtocol.transactions`` /
  ``send_stun``: ``tolerate_late_consent`` keeps RFC 7675 consent freshness with checks that
  may be answered late (aioice: within 0.5 s).
- ``RTCPeerConnection.__iceTransports``, aioice ``Connection.get_component_candidates`` (replaced
  per instance) / ``_protocols`` / ``_local_username`` / ``stun_server``, ``StunProtocol``
  (``connection_made``, ``transactions``, ``local_candidate``), ``aioice.candidate``'s
  ``Candidate`` / ``candidate_foundation`` / ``candidate_priority`` and
  ``aioice.ice.server_reflexive_candidate``: ``share_udp_socket`` gathers a server session's
  host candidates on the worker's shared UDP socket (gateway/net/udp_mux.py) instead of one
  socket per session; ``restart_ice`` then registers the new ufrag with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import aioice.candidate
import aioice.ice
import aioice.stun
import aiortc.rtcdtlstransport
import aiortc.rtcrtpsender
import pylibsrtp
from aiortc import (
    RTCDtlsTransport,
    RTCPeerConnection,
    RTCRtpReceiver,
    RTCRtpSender,
    RTCRtpTransceiver,
)
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from OpenSSL import SSL

from gateway.net.udp_mux import UdpMux

log = logging.getLogger(__name__)

_SENDER_HISTORY = "_RTCRtpSender__rtp_history"
_SENDER_EXTENSIONS = "_RTCRtpSender__rtp_header_extensions_map"
_ORIGINAL_SEND_RTP = "_gateway_original_send_rtp"
_RECEIVER_JITTER_BUFFER = "_RTCRtpReceiver__jitter_buffer"

_original_get_host_addresses = aioice.ice.get_host_addresses


def check_internals() -> list[str]:
    """Names this module relies on that the installed aiortc/aioice no longer provide."""
    problems: list[str] = []
    if not isinstance(getattr(aiortc.rtcrtpsender, "RTP_HISTORY_SIZE", None), int):
        problems.append("aiortc.rtcrtpsender.RTP_HISTORY_SIZE")
    for name in ("_retransmit", "_run_rtp", "_next_encoded_frame"):
        if not callable(getattr(RTCRtpSender, name, None)):
            problems.append(f"RTCRtpSender.{name}")
    for name in ("_handle_rtp_packet",):
        if not callable(getattr(RTCRtpReceiver, name, None)):
            problems.append(f"RTCRtpReceiver.{name}")
    for name in ("_handle_rtcp_data", "_send_rtp", "_recv_next", "_write_ssl"):
        if not callable(getattr(RTCDtlsTransport, name, None)):
            problems.append(f"RTCDtlsTransport.{name}")
    for name in ("data_received", "sendto"):
        if not callable(getattr(aioice.ice.Connection, name, None)):
            problems.append(f"aioice.Connection.{name}")
    if not callable(getattr(aioice.ice, "get_host_addresses", None)):
        problems.append("aioice.ice.get_host_addresses")
    if not hasattr(getattr(aiortc.rtcdtlstransport, "State", None), "CONNECTED"):
        problems.append("aiortc.rtcdtlstransport.State.CONNECTED")
    if not isinstance(getattr(aioice.ice, "StunProtocol", None), type):
        problems.append("aioice.ice.StunProtocol")
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("_local_username", "_local_password", "_remote_candidates_end", "_nominated"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    problems.extend(_receiver_rtcp_problems())
    problems.extend(_teardown_problems())
    problems.extend(_mux_problems())
    problems.extend(_consent_problems())
    problems.extend(_check_pacing_problems())
    if not hasattr(pylibsrtp, "_binding") or not hasattr(pylibsrtp, "SRTP_MAX_TRAILER_LEN"):
        problems.append("pylibsrtp._binding / SRTP_MAX_TRAILER_LEN")
    return problems


def _require(obj: object, attr: str) -> None:
    if not hasattr(obj, attr):
        raise RuntimeError(
            f"aiortc internals moved: {type(obj).__name__} has no {attr!r}; "
            "gateway.aiortc_compat needs updating for this aiortc version"
        )


# --- sender: retransmission history -----------------------------------------------------------


def install_sender_history(sender: RTCRtpSender, history: Any) -> None:
    """Make ``history`` (``__setitem__(key, packet)`` / ``get(key)``) this sender's RTP history.

    aiortc stores ``history[seq % RTP_HISTORY_SIZE] = packet`` before sending each packet and
    reads ``history.get(seq % RTP_HISTORY_SIZE)`` on a NACK; ``history`` must key by the packet's
    own ``sequence_number``, not by the truncated key (the size stays aiortc's, process-wide).
    """
    _require(sender, _SENDER_HISTORY)
    setattr(sender, _SENDER_HISTORY, history)


def sender_history(sender: RTCRtpSender) -> Any:
    return getattr(sender, _SENDER_HISTORY)


# --- answer: codec parameters -------------------------------------------------------------------


def negotiated_codecs(transceiver: RTCRtpTransceiver) -> list[RTCRtpCodecParameters]:
    _require(transceiver, "_codecs")
    return list(transceiver._codecs)


def pin_codecs(
    transceiver: RTCRtpTransceiver,
    codecs: Sequence[RTCRtpCodecParameters],
) -> None:
    """Replace the negotiated codec list (what the answer lists and the sender uses)."""
    _require(transceiver, "_codecs")
    transceiver._codecs = list(codecs)


# --- ICE: host candidate addresses ------------------------------------------------------------


def restrict_ice_hosts(hosts: Sequence[str] | None) -> None:
    """Gather host candidates on ``hosts`` only (None or empty: aioice's default, all interfaces).

    Process-wide: aioice reads this function for every ICE gathering.
    """
    if not hosts:
        aioice.ice.get_host_addresses = _original_get_host_addresses
        return
    addresses = [str(ipaddress.ip_address(h)) for h in hosts]

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [
            a
            for a in addresses
            if (use_ipv4 and ipaddress.ip_address(a).version == 4)
            or (use_ipv6 and ipaddress.ip_address(a).version == 6)
        ]

    aioice.ice.get_host_addresses = get_host_addresses


# --- receiver: raw RTP taps (our own receive path) --------------------------------------------


class _DiscardJitterBuffer:
    """Stands in for aiortc's audio jitter buffer: nothing reaches aiortc's decoder thread."""

    def add(self, packet: Any) -> tuple[bool, None]:
        return False, None


RtpTap = Callable[[Any, int], None]


def tap_rtp(receiver: RTCRtpReceiver, tap: RtpTap, bypass_decoder: bool = True) -> None:
    """Call ``tap(packet, arrival_time_ms)`` for every RTP packet the receiver accepts.

    aiortc still keeps its RTCP statistics (receiver reports); with ``bypass_decoder`` its
    jitter buffer and decoder are skipped so our own receive path is the only consumer.
    """
    _require(receiver, "_handle_rtp_packet")
    original: Callable[[Any, int], Awaitable[None]] = receiver._handle_rtp_packet
    if bypass_decoder:
        _require(receiver, _RECEIVER_JITTER_BUFFER)
        setattr(receiver, _RECEIVER_JITTER_BUFFER, _DiscardJitterBuffer())

    async def handle(packet: Any, arrival_time_ms: int) -> None:
        tap(packet, arrival_time_ms)
        await original(packet, arrival_time_ms)

    receiver._handle_rtp_packet = handle  # type: ignore[method-assign]


# --- sender: RTCP interception and retransmission --------------------------------------------


def sender_ssrc(sender: RTCRtpSender) -> int:
    _require(sender, "_ssrc")
    return int(sender._ssrc)


RtcpHandler = Callable[[bytes], Awaitable[bytes]]


def intercept_rtcp(transport: RTCDtlsTransport, handler: RtcpHandler) -> None:
    """Give ``handler`` every decrypted compound RTCP datagram before aiortc parses it.

    The handler returns the bytes aiortc should still see (the packets it did not consume);
    empty bytes stop aiortc from seeing the datagram at all.
    """
    _require(transport, "_handle_rtcp_data")
    original: Callable[[bytes], Awaitable[None]] = transport._handle_rtcp_data

    async def handle(data: bytes) -> None:
        rest = await handler(data)
        if rest:
            await original(rest)

    transport._handle_rtcp_data = handle  # type: ignore[method-assign]


def _raw_send_rtp(transport: RTCDtlsTransport) -> Callable[[bytes], Awaitable[None]]:
    return getattr(transport, _ORIGINAL_SEND_RTP, None) or transport._send_rtp


def filter_first_transmissions(
    transport: RTCDtlsTransport, fn: Callable[[bytes], bytes | None]
) -> None:
    """Pass every RTP first transmission aiortc sends through ``fn(rtp_bytes)``: the bytes it
    returns are sent (None: nothing). Retransmissions sent through ``send_unprotected`` bypass
    the filter; RTCP (second octet 192..223) is never given to it."""
    _require(transport, "_send_rtp")
    original = transport._send_rtp
    setattr(transport, _ORIGINAL_SEND_RTP, original)

    async def send(data: bytes) -> None:
        if len(data) > 1 and 192 <= data[1] <= 223:
            await original(data)
            return
        out = fn(data)
        if out is not None:
            await original(out)

    transport._send_rtp = send  # type: ignore[method-assign]


def drop_first_transmissions(transport: RTCDtlsTransport, drop: Callable[[bytes], bool]) -> None:
    """TEST ONLY: drop RTP first transmissions for which ``drop(rtp_bytes)`` is true."""
    filter_first_transmissions(transport, lambda data: None if drop(data) else data)


async def send_unprotected(transport: RTCDtlsTransport, data: bytes) -> None:
    """Send raw RTP or RTCP bytes (told apart by their payload type octet) over an established
    DTLS-SRTP transport: SRTP/SRTCP protection, ICE, past any test-only first-transmission filter.
    """
    _require(transport, "_send_rtp")
    await _raw_send_rtp(transport)(data)


# --- ICE: datagram impairment ------------------------------------------------------------------

Deliver = Callable[[bytes, Any], None]


def _ice_connection(transport: RTCDtlsTransport) -> Any:
    ice = transport.transport
    _require(ice, "_connection")
    return ice._connection


def impair_incoming(transport: RTCDtlsTransport, wrap: Callable[[Deliver], Deliver]) -> None:
    """Route every datagram the peer receives (after STUN) through ``wrap(deliver)``.

    ``deliver(data, component)`` hands a datagram on to DTLS/SRTP; the wrapper may drop, delay
    or duplicate it.
    """
    connection = _ice_connection(transport)
    _require(connection, "data_received")
    connection.data_received = wrap(connection.data_received)


def impair_outgoing(transport: RTCDtlsTransport, wrap: Callable[[Deliver], Deliver]) -> int:
    """Route every datagram the peer sends through ``wrap(sendto)``; returns sockets wrapped."""
    connection = _ice_connection(transport)
    _require(connection, "_protocols")
    wrapped = 0
    for protocol in connection._protocols:
        udp = getattr(protocol, "transport", None)
        if udp is not None:
            udp.sendto = wrap(udp.sendto)
            wrapped += 1
    return wrapped


# --- receiver: our own RTCP (added for the receive path) -----------------------------------------

_RECEIVER_RTCP_SSRC = "_RTCRtpReceiver__rtcp_ssrc"


def _receiver_rtcp_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    if not callable(getattr(RTCRtpReceiver, "_set_rtcp_ssrc", None)):
        problems.append("RTCRtpReceiver._set_rtcp_ssrc")  # what sets __rtcp_ssrc
    if not callable(getattr(aiortc.rtcrtpsender, "random_sequence_number", None)):
        problems.append("aiortc.rtcrtpsender.random_sequence_number")
    return problems


def accept_payload_type(receiver: RTCRtpReceiver, payload_type: int) -> None:
    """Route RTP of ``payload_type`` to ``receiver`` (aiortc discards payload types it did not
    negotiate itself, such as RED). Call after the remote description is set."""
    transport = receiver.transport
    _require(transport, "_rtp_router")
    table = transport._rtp_router.payload_type_table
    table.setdefault(payload_type, set()).add(receiver)


def receiver_rtcp_ssrc(receiver: RTCRtpReceiver) -> int | None:
    """The SSRC aiortc puts in this receiver's RTCP (its transceiver's sender SSRC), once set."""
    value = getattr(receiver, _RECEIVER_RTCP_SSRC, None)
    return None if value is None else int(value)


async def send_receiver_rtcp(receiver: RTCRtpReceiver, data: bytes) -> bool:
    """Send raw RTCP bytes (our own NACKs, wrap-safe) through the receiver's DTLS-SRTP transport.

    ``data`` must look like RTCP (second octet 192..208) so it is protected as SRTCP.
    Returns False when the transport is not (or no longer) connected.
    """
    try:
        await send_unprotected(receiver.transport, data)
    except ConnectionError:
        return False
    return True


@contextlib.contextmanager
def fixed_start_sequence(seq: int) -> Iterator[None]:
    """TEST ONLY: RTP senders started inside this block begin at sequence number ``seq``.

    aiortc draws it in ``RTCRtpSender._run_rtp`` from ``random_sequence_number()`` (a module
    global), always in the lower half of the space; this lets a test start just below the wrap.
    Process-wide while active: keep the block around one sender's start.
    """
    if not 0 <= seq <= 0xFFFF:
        raise ValueError("sequence number must be 0..65535")
    original = aiortc.rtcrtpsender.random_sequence_number
    aiortc.rtcrtpsender.random_sequence_number = lambda: seq
    try:
        yield
    finally:
        aiortc.rtcrtpsender.random_sequence_number = original


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


def srtp_protector(session: pylibsrtp.Session) -> Callable[[bytes], bytes]:
    """``session.protect`` without its per-call overhead (a new ``int *`` per call, type checks):
    libsrtp's ``srtp_protect`` on the session's own buffer, ≈1.1 µs less per packet. Falls back
    to ``session.protect`` when pylibsrtp's internals are not where this expects them."""
    srtp = getattr(session, "_srtp", None)
    cdata = getattr(session, "_cdata", None)
    buffer = getattr(session, "_buffer", None)
    binding = getattr(pylibsrtp, "_binding", None)
    if srtp is None or cdata is None or buffer is None or binding is None:
        return session.protect
    protect_c = binding.lib.srtp_protect
    length = binding.ffi.new("int *")
    ctx = srtp[0]
    limit = len(buffer) - pylibsrtp.SRTP_MAX_TRAILER_LEN

    def protect(packet: bytes) -> bytes:
        n = len(packet)
        if n > limit:
            raise ValueError("packet is too long")
        buffer[0:n] = packet
        length[0] = n
        rc = protect_c(ctx, cdata, length)
        if rc:
            raise pylibsrtp.Error(f"srtp_protect failed ({rc})")
        return bytes(buffer[0 : length[0]])

    return protect


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


# --- DTLS: release the handshake's OpenSSL state ---------------------------------------------


class _ReleasedDtls:
    """Stands in for ``RTCDtlsTransport._ssl`` once an audio-only DTLS 1.2 client is established.

    What aiortc still asks of the connection then: read incoming DTLS records (an alert --
    content type 21, close_notify or fatal -- is the peer closing; anything else, such as a
    repeated handshake record, is dropped: there are no data channels), and on ``stop`` write a
    close_notify, which was produced by the real connection at release time (its record sequence
    number is still the next one: nothing else is sent over DTLS after the handshake).
    """

    __slots__ = ("_close_notify", "_peer_closed", "_shut")

    def __init__(self, close_notify: bytes) -> None:
        self._close_notify = close_notify
        self._peer_closed = False
        self._shut = False

    def bio_write(self, data: bytes) -> int:
        if data[:1] == b"\x15":
            self._peer_closed = True
        return len(data)

    def recv(self, bufsiz: int) -> bytes:
        if self._peer_closed:
            raise SSL.ZeroReturnError
        raise SSL.WantReadError

    def bio_read(self, bufsiz: int) -> bytes:
        if self._shut and self._close_notify:
            data, self._close_notify = self._close_notify, b""
            return data
        raise SSL.WantReadError

    def shutdown(self) -> bool:
        self._shut = True
        return True

    def send(self, buf: bytes, flags: int = 0) -> int:
        raise SSL.Error("DTLS state released: no application data on this transport")

    def DTLSv1_get_timeout(self) -> None:
        return None

    def DTLSv1_handle_timeout(self) -> bool:
        return False


def release_dtls(transport: RTCDtlsTransport) -> bool:
    """Free the DTLS connection's OpenSSL state (handshake buffers, record layers, the two 16 KB
    record buffers, its SSL_CTX: ≈100 KB) once the SRTP keys are derived, keeping what aiortc
    still needs (``_ReleasedDtls``). Only where nothing can need the real connection again:
    DTLS 1.2, client role (the peer sent the last flight: nothing of ours to retransmit), no
    data channel, handshake complete. Returns whether it released."""
    for attr in ("_ssl", "_role", "_data_receiver"):
        _require(transport, attr)
    ssl = transport._ssl
    if (
        ssl is None
        or isinstance(ssl, _ReleasedDtls)
        or transport.state != "connected"
        or transport._role != "client"
        or transport._data_receiver is not None
    ):
        return False
    try:
        if ssl.get_protocol_version_name() != "DTLSv1.2" or ssl.DTLSv1_get_timeout() is not None:
            return False
        ssl.shutdown()
        close_notify = ssl.bio_read(1500)
    except SSL.Error:
        return False
    if close_notify[:1] != b"\x15":
        return False
    transport._ssl = _ReleasedDtls(close_notify)  # type: ignore[assignment]
    return True


def dtls_released(transport: RTCDtlsTransport) -> bool:
    return isinstance(getattr(transport, "_ssl", None), _ReleasedDtls)



# --- teardown: a closed peer connection's reference cycles, cut (session/teardown.py) ----------

_OUR_DTLS_WRAPPERS = ("_handle_rtcp_data", "_send_rtp", _ORIGINAL_SEND_RTP)
_OUR_RECEIVER_WRAPPERS = ("_handle_rtp_packet",)


def _teardown_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    connection = aioice.ice.Connection(ice_controlling=True)
    if not isinstance(getattr(connection, "_check_list", None), list):
        problems.append("aioice.Connection._check_list")
    for name in ("CONSENT_INTERVAL", "CONSENT_FAILURES"):
        if not isinstance(getattr(aioice.ice, name, None), int | float):
            problems.append(f"aioice.ice.{name}")
    return problems


def peer_connection_transports(pc: RTCPeerConnection) -> list[Any]:
    """The peer connection's DTLS and ICE transports (public properties), each once."""
    found: dict[int, Any] = {}
    for transceiver in pc.getTransceivers():
        for part in (transceiver.sender, transceiver.receiver):
            dtls = part.transport
            if dtls is not None:
                found.setdefault(id(dtls), dtls)
                found.setdefault(id(dtls.transport), dtls.transport)
    sctp = pc.sctp
    if sctp is not None:
        found.setdefault(id(sctp.transport), sctp.transport)
        found.setdefault(id(sctp.transport.transport), sctp.transport.transport)
    return list(found.values())


def release_peer_connection(pc: RTCPeerConnection) -> None:
    """Cut the reference cycles a *closed* peer connection keeps, so refcounting frees it:

    - every transport's event listeners (pyee's public ``remove_all_listeners``): aiortc's
      ``close`` removes the peer connection's own and the ICE transport's, not the DTLS
      transport's ``statechange`` -> ``RTCPeerConnection.__updateConnectionState`` -> the peer
      connection -> its DTLS transports;
    - the instance-level wrappers this module installed (``intercept_rtcp``,
      ``drop_first_transmissions``, ``tap_rtp``, ``impair_incoming``): closures over our
      objects that reach the transport again (RTCP handler -> Retransmitter -> sender ->
      transport; a client's datagram hook -> the client -> its peer connection);
    - aioice's ``Connection._check_list``: pair -> protocol -> ``receiver`` (the connection);
      its ``close`` empties the protocols and nominated pairs but keeps the list.
    """
    for transceiver in pc.getTransceivers():
        receiver_vars = vars(transceiver.receiver)
        for name in _OUR_RECEIVER_WRAPPERS:
            receiver_vars.pop(name, None)
    for transport in peer_connection_transports(pc):
        transport.remove_all_listeners()
        if isinstance(transport, RTCDtlsTransport):
            transport_vars = vars(transport)
            for name in _OUR_DTLS_WRAPPERS:
                transport_vars.pop(name, None)
        else:  # RTCIceTransport
            transport.iceGatherer.remove_all_listeners()
            connection = getattr(transport, "_connection", None)
            if connection is not None:
                vars(connection).pop("data_received", None)  # ``impair_incoming``'s wrapper
                vars(connection).pop("get_component_candidates", None)  # ``share_udp_socket``
                vars(connection).pop(_MUX_ENDPOINTS, None)
                check_list = getattr(connection, "_check_list", None)
                if isinstance(check_list, list):
                    check_list.clear()
    pc.remove_all_listeners()


@contextlib.contextmanager
def consent_timing(interval_s: float, failures: int) -> Iterator[None]:
    """TEST ONLY: ICE consent freshness (RFC 7675) checked every ``interval_s`` (±20 %), a peer
    failed after ``failures`` checks in a row go unanswered (aioice: 5 s and 6, ≈30 s).

    aioice reads ``CONSENT_INTERVAL`` / ``CONSENT_FAILURES`` (module globals) on every check,
    so running connections follow too. Process-wide while active.
    """
    if interval_s <= 0 or failures < 1:
        raise ValueError("interval must be positive and failures at least 1")
    saved = aioice.ice.CONSENT_INTERVAL, aioice.ice.CONSENT_FAILURES
    aioice.ice.CONSENT_INTERVAL = interval_s  # type: ignore[assignment]
    aioice.ice.CONSENT_FAILURES = failures
    try:
        yield
    finally:
        aioice.ice.CONSENT_INTERVAL, aioice.ice.CONSENT_FAILURES = saved


# --- ICE consent freshness (RFC 7675): a late answer still counts ---------------------------

#: Retransmissions of one consent check (RFC 5389 timing: sent at 0, 0.5, 1.5 and 3.5 s), where
#: aioice sends one. Its answer counts for as long as the consent window lasts (30 s).
CONSENT_RETRANSMISSIONS = 3


class ConsentStats:
    """Process-wide counts of the consent checks ``tolerate_late_consent`` sent (plain ints:
    read by /healthz and /metrics)."""

    __slots__ = ("answered", "answered_late", "checks", "expired", "unanswered")

    def __init__(self) -> None:
        self.checks = 0  # consent checks sent (each with its retransmissions)
        self.answered = 0
        self.answered_late = 0  # answered after 0.5 s: a failure to stock aioice
        self.unanswered = 0  # no answer within the consent window
        self.expired = 0  # connections closed: no check sent within the window was answered

    def as_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


CONSENT = ConsentStats()


def tolerate_late_consent(pc: RTCPeerConnection) -> int:
    """RFC 7675 consent freshness for ``pc``'s ICE agents, in place of aioice's, which sends
    each check once and counts it failed unless answered within 0.5 s (``RETRY_RTO``): six such
    in a row (≈30 s) and it closes the connection, even if every check was answered -- a peer
    or a network more than 0.5 s behind (a saturated load generator, a busy browser tab, a
    bufferbloated uplink) loses its session although it consents all along. Here a check is
    retransmitted (``CONSENT_RETRANSMISSIONS``), its answer is accepted until the consent window
    ends, and consent expires when no check sent within the last ``CONSENT_INTERVAL *
    CONSENT_FAILURES`` (30 s) was answered, as RFC 7675 section 5.1 has it. Checks still go every
    ``CONSENT_INTERVAL`` (±20 %).

    Call before the connection starts (``connect`` creates the consent task from
    ``Connection.query_consent``, replaced here per instance). Returns the agents changed."""
    changed = 0
    attrs = ("query_consent", "_query_consent_task", "_nominated", "build_request")
    for connection in _ice_connections(pc, attrs):
        if "query_consent" in vars(connection):
            continue
        connection.query_consent = _ConsentQuery(connection)
        changed += 1
    return changed


def _consent_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("query_consent", "build_request", "close"):
        if not callable(getattr(probe, name, None)):
            problems.append(f"aioice.Connection.{name}")
    for name in ("_query_consent_task", "remote_password"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    if "query_consent" not in aioice.ice.Connection.connect.__code__.co_names:
        problems.append("aioice.Connection.connect no longer starts query_consent")
    stun_protocol = getattr(aioice.ice, "StunProtocol", None)
    if not callable(getattr(stun_protocol, "send_stun", None)):
        problems.append("aioice.StunProtocol.send_stun")
    code = getattr(getattr(stun_protocol, "datagram_received", None), "__code__", None)
    if code is None or "response_received" not in code.co_names:  # how it answers transactions
        problems.append("aioice.StunProtocol.datagram_received -> transactions[id]")
    if not isinstance(getattr(aioice.stun, "RETRY_RTO", None), int | float):
        problems.append("aioice.stun.RETRY_RTO")
    return problems


class _ConsentCheck:
    """One consent check's STUN transaction, answerable for the whole consent window: it stands
    in for aioice's ``stun.Transaction`` in ``StunProtocol.transactions`` (which hands it every
    response with its transaction id)."""

    __slots__ = ("answer", "key")

    def __init__(self, key: bytes, answer: asyncio.Future[None]) -> None:
        self.key = key
        self.answer = answer

    def response_received(self, message: Any, addr: tuple[str, int]) -> None:
        if (not self.answer.done() and message.message_class == aioice.stun.Class.RESPONSE
                and message.check_message_integrity(self.key)):
            self.answer.set_result(None)


class _ConsentQuery:
    """``connection.query_consent`` for one connection, holding it weakly: a bound method or a
    partial stored on the instance is a reference cycle, and a closed session must be freed
    by reference counting, not left for the cyclic collector (tests/test_gc_churn.py)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Any) -> None:
        self._connection = weakref.ref(connection)

    def __call__(self) -> Awaitable[None]:
        connection = self._connection()
        return asyncio.sleep(0) if connection is None else _query_consent(connection)


async def _query_consent(connection: Any) -> None:
    loop = asyncio.get_running_loop()
    fresh_since = loop.time()  # when the latest answered check was sent (connect: a check)
    checks: set[asyncio.Future[None]] = set()

    async def check(pair: Any, window: float) -> None:
        nonlocal fresh_since
        request = connection.build_request(pair, nominate=False)
        key = connection.remote_password.encode("utf8")
        request.add_message_integrity(key)
        answer: asyncio.Future[None] = loop.create_future()
        protocol, txid = pair.protocol, request.transaction_id
        protocol.transactions[txid] = _ConsentCheck(key, answer)
        sent = loop.time()
        CONSENT.checks += 1
        try:
            wait = aioice.stun.RETRY_RTO
            for retransmission in range(CONSENT_RETRANSMISSIONS + 1):
                protocol.send_stun(request, pair.remote_addr)
                last = retransmission == CONSENT_RETRANSMISSIONS
                timeout = max(0.0, sent + window - loop.time()) if last else wait
                done, _ = await asyncio.wait([answer], timeout=timeout)
                if done:
                    break
                wait *= 2
        finally:
            protocol.transactions.pop(txid, None)
        if not answer.done():
            CONSENT.unanswered += 1
            return
        CONSENT.answered += 1
        if loop.time() - sent > aioice.stun.RETRY_RTO:
            CONSENT.answered_late += 1
        fresh_since = max(fresh_since, sent)

    try:
        while True:
            interval = aioice.ice.CONSENT_INTERVAL
            await asyncio.sleep(interval * (0.8 + 0.4 * random.random()))
            window = interval * aioice.ice.CONSENT_FAILURES
            if loop.time() - fresh_since >= window:
                break
            for pair in list(connection._nominated.values()):
                task = asyncio.ensure_future(check(pair, window))
                checks.add(task)
                task.add_done_callback(checks.discard)
    finally:
        for task in list(checks):
            task.cancel()
    CONSENT.expired += 1
    log.info("ICE consent expired: no answer to a check sent in the last %.0f s",
             loop.time() - fresh_since)
    connection._query_consent_task = None  # close() would otherwise cancel this very task
    await connection.close()


# --- ICE: restart with new credentials (WHEP PATCH, RFC 8840 / 8445 section 9) ------------------


def restart_ice(
    ice: Any, remote_ufrag: str, remote_pwd: str, local: tuple[str, str] | None = None
) -> tuple[str, str]:
    """Give ``ice`` (an ``RTCIceTransport``) new local credentials (``local`` or random ones,
    RFC 8445's 4+ and 22+ characters) and the remote side's new ones, in place; returns the new
    local (ufrag, pwd). Checks and consent (RFC 7675) use the new credentials from now on; the
    nominated pair keeps carrying media until the peer nominates another; new remote candidates
    may be trickled again."""
    _require(ice, "_connection")
    connection = ice._connection
    for attr in ("_local_username", "_local_password", "_remote_candidates_end"):
        _require(connection, attr)
    muxed = _MUX_ENDPOINTS in vars(connection)
    ufrag_length = _MUX_UFRAG_LENGTH if muxed else 4
    ufrag, pwd = local or (aioice.ice.random_string(ufrag_length), aioice.ice.random_string(22))
    aioice.ice.validate_username(ufrag)
    aioice.ice.validate_password(pwd)
    aioice.ice.validate_username(remote_ufrag)
    aioice.ice.validate_password(remote_pwd)
    if muxed:
        _note_mux_ufrag(connection, ufrag)
    connection._local_username, connection._local_password = ufrag, pwd
    connection.remote_username, connection.remote_password = remote_ufrag, remote_pwd
    connection._remote_candidates_end = False
    return ufrag, pwd


def ice_credentials(ice: Any) -> tuple[tuple[str, str], tuple[str | None, str | None]]:
    """((local ufrag, pwd), (remote ufrag, pwd)) of an ``RTCIceTransport``."""
    connection = _ice_connection_of(ice)
    return ((connection.local_username, connection.local_password),
            (connection.remote_username, connection.remote_password))


def _ice_connection_of(ice: Any) -> Any:
    _require(ice, "_connection")
    return ice._connection


# --- ICE: the nominated pair's candidate types (latency timelines; read-only) -------------------


def nominated_pair_types(transport: RTCDtlsTransport) -> dict[str, str | None] | None:
    """The nominated pair's local and remote candidate types (``host``, ``prflx``, ``srflx``,
    ``relay``) and the remote address, or None before a pair is nominated. A remote ``prflx``
    is a peer whose checks came before (or without) its candidate: a trickle offer with no
    candidates in it."""
    ice = transport.transport
    connection = getattr(ice, "_connection", None)
    nominated = getattr(connection, "_nominated", None)
    if not isinstance(nominated, dict):
        return None
    pair = nominated.get(1)
    if pair is None:
        return None
    remote = pair.remote_candidate
    host = f"[{remote.host}]" if ":" in remote.host else remote.host
    return {"local": pair.local_candidate.type, "remote": remote.type,
            "remote_address": f"{host}:{remote.port}"}


# --- ICE: one shared UDP socket per worker ---------------------------------------------------

_PC_ICE_TRANSPORTS = "_RTCPeerConnection__iceTransports"


def _ice_connections(pc: RTCPeerConnection, attrs: Sequence[str]) -> Iterator[Any]:
    """The aioice ``Connection`` of each of ``pc``'s ICE transports, each checked to have
    ``attrs`` (a loud error if an upgrade moved them)."""
    transports = getattr(pc, _PC_ICE_TRANSPORTS, None)
    if not isinstance(transports, set):
        raise RuntimeError(f"aiortc internals moved: RTCPeerConnection has no {_PC_ICE_TRANSPORTS}")
    for ice in list(transports):
        connection = _ice_connection_of(ice)
        for attr in attrs:
            _require(connection, attr)
        yield connection
_MUX_ENDPOINTS = "_gateway_mux_endpoints"
_MUX_UFRAG_LENGTH = 8  # aioice draws 4 characters: 1 in ≈15 M; on one socket, ufrags must differ


def _mux_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("_protocols", "_local_username", "stun_server"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    if not callable(getattr(probe, "get_component_candidates", None)):
        problems.append("aioice.Connection.get_component_candidates")
    for name in ("server_reflexive_candidate", "random_string"):
        if not callable(getattr(aioice.ice, name, None)):
            problems.append(f"aioice.ice.{name}")
    for name in ("Candidate", "candidate_foundation", "candidate_priority"):
        if not callable(getattr(aioice.candidate, name, None)):
            problems.append(f"aioice.candidate.{name}")
    stun_protocol = getattr(aioice.ice, "StunProtocol", None)
    code = getattr(getattr(stun_protocol, "__init__", None), "__code__", None)
    for name in ("transactions", "receiver"):  # set in its __init__ (which needs a loop)
        if code is None or name not in code.co_names:
            problems.append(f"aioice.StunProtocol.{name}")
    for name in ("connection_made", "datagram_received", "connection_lost"):
        if not callable(getattr(stun_protocol, name, None)):
            problems.append(f"aioice.StunProtocol.{name}")
    if _PC_ICE_TRANSPORTS not in RTCPeerConnection.__init__.__code__.co_names:
        problems.append(f"RTCPeerConnection.{_PC_ICE_TRANSPORTS}")
    return problems


def host_addresses() -> list[str]:
    """The addresses aioice gathers host candidates on (``restrict_ice_hosts`` applies)."""
    return list(aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True))


def share_udp_socket(pc: RTCPeerConnection, muxes: Callable[[str], UdpMux | None]) -> int:
    """Make ``pc``'s ICE agents gather their host candidates on the worker's shared sockets
    (``muxes(address)``: the ``UdpMux`` of that host address) instead of binding one socket per
    session: each agent's ``StunProtocol`` is given a ``MuxEndpoint`` as its transport, reached
    by our ufrag (made 8 characters long: unique on the socket). The host candidate advertises
    the shared port. Server-reflexive candidates (a STUN server) are asked for through the
    shared socket; TURN relays are aioice's own, as before.

    Call after ``setRemoteDescription`` and before ``setLocalDescription`` (which gathers).
    Returns the ICE agents changed."""
    changed = 0
    attrs = ("_protocols", "_local_username", "get_component_candidates")
    for connection in _ice_connections(pc, attrs):
        if _MUX_ENDPOINTS in vars(connection):
            continue
        connection._local_username = aioice.ice.random_string(_MUX_UFRAG_LENGTH)
        setattr(connection, _MUX_ENDPOINTS, [])
        connection.get_component_candidates = _muxed_gathering(
            connection, connection.get_component_candidates, muxes
        )
        changed += 1
    return changed


def _muxed_gathering(
    connection: Any,
    original: Callable[..., Awaitable[list[Any]]],
    muxes: Callable[[str], UdpMux | None],
) -> Callable[..., Awaitable[list[Any]]]:
    async def get_component_candidates(
        component: int, addresses: list[str], timeout: int = 5
    ) -> list[Any]:
        candidates: list[Any] = []
        protocols: list[Any] = []
        unmuxed: list[str] = []
        for address in addresses:
            mux = muxes(address)
            if mux is None:  # an interface that appeared after start-up: aioice's own socket
                unmuxed.append(address)
                continue
            protocol = aioice.ice.StunProtocol(connection)
            endpoint = mux.attach(protocol, connection.local_username)
            getattr(connection, _MUX_ENDPOINTS).append(endpoint)
            protocol.connection_made(endpoint)
            protocol.local_candidate = aioice.candidate.Candidate(
                foundation=aioice.candidate.candidate_foundation("host", "udp", address),
                component=component, transport="udp",
                priority=aioice.candidate.candidate_priority(component, "host"),
                host=address, port=mux.local_address[1], type="host",
            )
            candidates.append(protocol.local_candidate)
            protocols.append(protocol)
        connection._protocols += protocols
        if connection.stun_server:
            tasks = [
                asyncio.ensure_future(
                    aioice.ice.server_reflexive_candidate(p, connection.stun_server))
                for p in protocols
                if ipaddress.ip_address(p.local_candidate.host).version == 4
            ]
            if tasks:
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                for task in pending:
                    task.cancel()
                candidates += [t.result()[0] for t in done if t.exception() is None]
        # TURN (and hosts with no shared socket): aioice's own gathering, its own sockets
        return candidates + await original(component, unmuxed, timeout)

    return get_component_candidates


def _note_mux_ufrag(connection: Any, ufrag: str) -> None:
    """An ICE restart on a shared socket: requests for the new ufrag reach this session too
    (raises ValueError, changing nothing, if another session of the socket has it)."""
    endpoints = vars(connection).get(_MUX_ENDPOINTS, ())
    for endpoint in endpoints:
        owner = endpoint.mux.owner_of(ufrag)
        if owner is not None and owner is not endpoint:
            raise ValueError("ufrag already in use on the shared UDP socket")
    for endpoint in endpoints:
        endpoint.add_ufrag(ufrag)


def uses_udp_mux(pc: RTCPeerConnection) -> bool:
    transports = getattr(pc, _PC_ICE_TRANSPORTS, set())
    return any(_MUX_ENDPOINTS in vars(_ice_connection_of(t)) for t in transports)


# --- ICE: a reflection budget -----------------------------------------------------------------

_CHECK_PERIODIC = "_check_periodic"  # aioice's Ta timer body: starts the next check, or stops
_PACED = "_gateway_paced_checks"


def _check_pacing_problems() -> list[str]:
    """check_internals' part for this section."""
    probe = aioice.ice.Connection(ice_controlling=False)
    problems = []
    if not callable(getattr(probe, _CHECK_PERIODIC, None)):
        problems.append(f"aioice.Connection.{_CHECK_PERIODIC}")
    if not hasattr(probe, "_check_list_done"):
        problems.append("aioice.Connection._check_list_done")
    connect = getattr(aioice.ice.Connection, "connect", None)
    if _CHECK_PERIODIC not in getattr(getattr(connect, "__code__", None), "co_names", ()):
        problems.append(f"aioice.Connection.connect no longer calls {_CHECK_PERIODIC}")
    return problems


def pace_connectivity_checks(pc: RTCPeerConnection, per_s: float) -> int:
    """At most ``per_s`` new ICE connectivity checks a second from each of ``pc``'s agents
    (bursts of ``per_s``), instead of aioice's one every 20 ms (50/s): each check goes to an
    address the remote side named, with up to 6 retransmissions, so an unpaced agent given
    thousands of candidates aimed at a third party is a reflection tool (3,000 candidates drew
    6,018 packets to one port in 30 s). aioice's ``connect`` calls ``_check_periodic`` every 20
    ms while it returns True; the paced one starts nothing (and keeps the timer going) while
    the budget is spent. Call after ``setRemoteDescription``. Returns the agents paced."""
    if per_s <= 0:
        return 0
    paced = 0
    for connection in _ice_connections(pc, (_CHECK_PERIODIC, "_check_list_done")):
        if _PACED in vars(connection):
            continue
        setattr(connection, _PACED, True)
        connection._check_periodic = _paced(connection, per_s)
        paced += 1
    return paced


def _paced(connection: Any, per_s: float) -> Callable[[], bool]:
    """The paced ``_check_periodic``. It holds the connection weakly and aioice's method
    unbound: stored on the connection, a closure over it (or over its bound method) would be a
    reference cycle, and every closed session's ICE state would wait for a full collection."""
    bound = connection._check_periodic
    original = getattr(bound, "__func__", None)
    if original is None or getattr(bound, "__self__", None) is not connection:
        raise TypeError("aioice's Connection._check_periodic is not a plain method here")
    ref = weakref.ref(connection)
    state = {"tokens": per_s, "at": time.monotonic()}

    def check_periodic() -> bool:
        conn = ref()
        if conn is None:
            return False
        now = time.monotonic()
        state["tokens"] = min(per_s, state["tokens"] + (now - state["at"]) * per_s)
        state["at"] = now
        if state["tokens"] < 1.0:
            return not conn._check_list_done  # wait for the budget; stop once done
        state["tokens"] -= 1.0
        return bool(original(conn))

    return check_periodic
