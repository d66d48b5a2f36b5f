"""The batch send path's reach into aiortc: the sender's RTP context and SR counters, and a
synchronous SRTP-protect-and-send on the nominated ICE pair (``direct_rtp_sender``)."""

from __future__ import annotations

import dis
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import aioice.candidate
import aioice.ice
import aioice.stun
import aiortc.rtcdtlstransport
import aiortc.rtcrtpsender
import pylibsrtp
from aiortc import (
    RTCDtlsTransport,
    RTCRtpSender,
)

from gateway.aiortc_compat._common import _ice_connection, _require
from gateway.aiortc_compat.dtls import (
    srtp_protect_address,
    srtp_protect_handle,
    srtp_protector,
)
from gateway.net import sendpath
from gateway.net.sendmmsg import sockaddr_bytes

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



class PathWatcher(Protocol):
    """Told when its connection's nominated pair changes (``NominatedPairs``)."""

    def path_moved(self) -> None: ...


class NominatedPairs(dict[int, Any]):
    """aioice's nominated pairs (``Connection._nominated``, put in its place by
    ``watched_nominated``) that tell ``moved`` -- a weak reference to a ``PathWatcher``, set
    while a stream C sends is on this connection -- when they change: another pair nominated
    (an ICE restart), or all dropped. aioice only sets items of it and clears it
    (``check_internals`` verifies that it never assigns another dict), so a stream sent from C
    goes back to the tick the moment its pair moves, with no per-stream polling."""

    __slots__ = ("moved",)

    def __init__(self, pairs: dict[int, Any]) -> None:
        super().__init__(pairs)
        self.moved: Callable[[], PathWatcher | None] | None = None

    def __setitem__(self, component: int, pair: Any) -> None:
        changed = self.get(component) is not pair
        super().__setitem__(component, pair)
        if changed:
            self._tell()

    def clear(self) -> None:
        super().clear()
        self._tell()

    def _tell(self) -> None:
        moved = self.moved
        watcher = None if moved is None else moved()
        if watcher is not None:
            watcher.path_moved()


def _nominated_problems() -> list[str]:
    """``NominatedPairs`` relies on aioice's ``Connection`` setting ``_nominated`` once (in
    ``__init__``) and then only its items: a method that stores another dict would bypass it."""
    problems = []
    for name, func in vars(aioice.ice.Connection).items():
        code = getattr(func, "__code__", None)
        if code is None or name == "__init__":
            continue
        if any(ins.opname == "STORE_ATTR" and ins.argval == "_nominated"
               for ins in dis.get_instructions(code)):
            problems.append(f"aioice.Connection.{name} assigns _nominated")
    return problems


def watched_nominated(connection: Any) -> NominatedPairs:
    """The connection's nominated pairs as a ``NominatedPairs`` (installed on first use: every
    holder of it -- the direct and compiled senders -- shares the one aioice updates)."""
    _require(connection, "_nominated")
    nominated = connection._nominated
    if type(nominated) is not NominatedPairs:
        nominated = connection._nominated = NominatedPairs(nominated)
    return nominated


def direct_rtp_sender(
    transport: RTCDtlsTransport, rtcp: bool = False
) -> Callable[[bytes], bool] | None:
    """A function that SRTP-protects and sends one serialized RTP packet synchronously (no
    await, no task switch) on the transport's nominated ICE pair, returning False, having sent
    nothing, once that is no longer possible (transport not connected, socket closed). With
    ``rtcp``, one serialized RTCP compound packet instead (SRTCP).

    None when it is not possible at all: not connected yet, or the nominated pair is not a
    plain UDP socket (a TURN relay) -- the caller then uses the async path (``send_rtp_packet``).
    The pair, socket and SRTP session are looked up once, not per packet.
    """
    _require(transport, "_tx_srtp")
    if transport.state != "connected":
        return None
    connection = _ice_connection(transport)
    nominated = watched_nominated(connection)
    pair = nominated.get(1)
    if pair is None or type(pair.protocol) is not aioice.ice.StunProtocol:
        return None
    udp = pair.protocol.transport
    if udp is None:
        return None
    # ``rtcp``: the packets are RTCP (sender reports): SRTCP-protected by pylibsrtp
    protect = transport._tx_srtp.protect_rtcp if rtcp else srtp_protector(transport._tx_srtp)
    sendto = _datagram_sender(udp)
    is_closing = udp.is_closing
    addr = pair.remote_addr
    _require(transport, "_state")
    connected = aiortc.rtcdtlstransport.State.CONNECTED

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


# --- the compiled send path (gateway/net/sendpath.py) ------------------------------------------


def resolve_send_path(mode: str) -> tuple[tuple[Any, int, int] | None, str]:
    """``--send-path``: (what ``MuxGroup(compiled=...)`` takes, or None for the Python path;
    why, for the log and /healthz). ``compiled`` raises RuntimeError where the extension cannot
    be had; ``auto`` falls back to the Python path."""
    if mode == "python":
        return None, "--send-path python"
    module = sendpath.load()
    protect = srtp_protect_address()
    if module is not None and protect is not None:
        return (module, protect, int(pylibsrtp.SRTP_MAX_TRAILER_LEN)), ""
    reason = (sendpath.failure() or "unavailable") if module is None else \
        "pylibsrtp's srtp_protect not found"
    if mode == "compiled":
        raise RuntimeError(f"--send-path compiled: the extension is unavailable ({reason})")
    return None, f"compiled path unavailable: {reason}"


def compiled_rtp_sender(
    sender: RTCRtpSender, header: bytes, ast_at: int
) -> Callable[[int, int, int, int, int, bytes], bool] | None:
    """``send(second_byte, seq, timestamp, abs_send_time, ntp, payload)``: the packet staged in
    the shared socket's ``CompiledBatch`` (``header`` -- the stream's serialized RTP header,
    abs-send-time at ``ast_at`` or -1 -- patched, SRTP-protected on the transport's own
    ``srtp_t``) to leave with the tick's ``sendmmsg``; False, having sent nothing and counted
    nothing, when it cannot (then the caller takes the Python path: not connected, a pair not
    on a shared socket with a compiled batch, a protect error). None when the stream cannot
    use it at all.

    aiortc's sender-report counters (``note_rtp_sent``'s; ``ntp``: the send time) are kept in
    C by ``gw_stage`` and added to aiortc's sender by ``send.sync()``, which the sender calls
    before each report (so aiortc's ``getStats`` counts lag by up to a report interval):
    writing four attributes of aiortc's sender per packet touched its object and dict and
    made two ints, cache misses at hundreds of streams (docs/density.md).

    Per packet this is one Python call around the C one: the batch's ``gw_stage`` and its
    pointer are bound in the closure once (again only when the nominated pair moves to
    another socket), the endpoint's ``closing`` flag is read, not asked.
    """
    transport = sender.transport
    _require(transport, "_tx_srtp")
    _require(sender, "_RTCRtpSender__octet_count")
    _require(sender, "_RTCRtpSender__packet_count")
    if transport.state != "connected":
        return None
    connection = _ice_connection(transport)
    nominated = watched_nominated(connection)
    session = transport._tx_srtp  # held by ``send``: its state must outlive every packet
    handle = srtp_protect_handle(session, int.from_bytes(header[8:12], "big"))
    if handle is None:
        return None
    protect_address, srtp_address = handle

    def resolve(pair: Any) -> tuple[Any, Any, Any] | None:
        """(endpoint, its mux, the mux's batch) of a nominated pair, when compiled."""
        if pair is None or type(pair.protocol) is not aioice.ice.StunProtocol:
            return None
        endpoint = pair.protocol.transport
        mux = getattr(endpoint, "mux", None)
        batch = getattr(mux, "compiled_batch", None)
        if batch is None:
            return None
        return endpoint, mux, batch

    pair = nominated.get(1)
    parts = resolve(pair)
    if parts is None:
        return None
    endpoint, mux, batch = parts
    name = sockaddr_bytes(pair.remote_addr)
    if name is None:
        return None
    try:
        stream = batch.new_stream(header, ast_at, srtp_address, name, protect_address)
    except ValueError:
        return None
    stage_c, ptr = batch.stage_c, batch.ptr
    connected = aiortc.rtcdtlstransport.State.CONNECTED

    def send(b1: int, seq: int, ts: int, ast: int, ntp: int, payload: bytes) -> bool:
        nonlocal pair, endpoint, mux, batch, stage_c, ptr
        if transport._state is not connected or endpoint.closing:
            return False
        current = nominated.get(1)
        if current is not pair:  # the peer nominated another pair (an ICE restart, say)
            found = resolve(current)
            address = None if found is None else sockaddr_bytes(current.remote_addr)
            if found is None or address is None:
                return False
            pair, (endpoint, mux, batch) = current, found
            batch.set_address(stream, address)
            stage_c, ptr = batch.stage_c, batch.ptr
        size = len(payload)
        n = stage_c(ptr, stream, b1, seq, ts, ast, ntp, payload, size)
        if n == 1:
            mux.staged()
        elif n == -2:  # the batch is full: out with it, then stage again
            mux.flush()
            n = stage_c(ptr, stream, b1, seq, ts, ast, ntp, payload, size)
            if n == 1:
                mux.staged()
        return n > 0

    def sync() -> None:
        """aiortc's sender-report counters brought up to date with what C staged since the
        last call (``note_rtp_sent`` for all of those packets at once)."""
        packets, octets, last_ts, last_ntp = batch.take_counters(stream)
        if not packets:
            return
        sender._RTCRtpSender__octet_count += octets  # type: ignore[attr-defined]
        sender._RTCRtpSender__packet_count += packets  # type: ignore[attr-defined]
        # the latest packet of either path (the Python path notes its own as it sends them)
        if last_ntp >= sender._RTCRtpSender__ntp_timestamp:  # type: ignore[attr-defined]
            sender._RTCRtpSender__ntp_timestamp = last_ntp  # type: ignore[attr-defined]
            sender._RTCRtpSender__rtp_timestamp = last_ts  # type: ignore[attr-defined]

    def park(times: tuple[float, float, float, float, float], slot: int, seq: int,
             ts_origin: int, b1: int, ring: Any, silence: bytes, handle: int,
             moved: Callable[[], PathWatcher | None] | None = None) -> Any:
        """Hand the stream's keep-alive silence to C (``CompiledBatch.park``) while the path
        is as ``send`` would find it; the batch it is parked on, or None (not parked).
        ``moved``: a weak reference to what is told (``path_moved``) when another pair is
        nominated while it is parked."""
        if not still_valid():
            return None
        if not batch.park(stream, times, slot, seq, ts_origin, b1, ring, silence, handle):
            return None
        nominated.moved = moved
        # (batch, socket, ``CompiledBatch.feed_run`` bound to the stream)
        return batch, mux, partial(batch.feed_run, stream)

    def unpark(parked: Any) -> tuple[float, float, list[int]] | None:
        nominated.moved = None
        return parked[0].unpark(stream)

    def still_valid() -> bool:
        """The path ``send`` last used is still the one it would use: connected, the socket
        open, the same nominated pair (an ICE restart moves it)."""
        return (transport._state is connected and not endpoint.closing
                and nominated.get(1) is pair)

    def unfeed(parked: Any) -> int:
        return parked[0].unfeed(stream)

    def take_sent(parked: Any) -> tuple[int, int]:
        return parked[0].take_sent(stream)

    def red_set(parked: Any, red_b1: int, payload_type: int,
                state: tuple[float, int, int, float], now: float) -> bool:
        return bool(parked[0].red_set(stream, red_b1, payload_type, state, now))

    def red_fill(parked: Any, capacity: int, history: list[tuple[int, bytes]]) -> bool:
        return bool(parked[0].red_fill(stream, capacity, history))

    def red_take(parked: Any) -> tuple[int, int, int, int]:
        return parked[0].red_take(stream)

    def dtx_set(parked: Any, idle: int, last_empty: bool, marker_b1: int, hangover: int,
                every: int, payload: bytes) -> bool:
        return bool(parked[0].dtx_set(stream, idle, last_empty, marker_b1, hangover, every,
                                      payload))

    def dtx_state(parked: Any) -> tuple[int, bool]:
        return parked[0].dtx_state(stream)

    send.keep = (stream, session)  # type: ignore[attr-defined]  # alive as long as ``send``
    send.sync = sync  # type: ignore[attr-defined]
    send.park = park  # type: ignore[attr-defined]
    send.unpark = unpark  # type: ignore[attr-defined]
    send.unfeed = unfeed  # type: ignore[attr-defined]
    send.take_sent = take_sent  # type: ignore[attr-defined]
    send.red_set = red_set  # type: ignore[attr-defined]
    send.red_fill = red_fill  # type: ignore[attr-defined]
    send.red_take = red_take  # type: ignore[attr-defined]
    send.dtx_set = dtx_set  # type: ignore[attr-defined]
    send.dtx_state = dtx_state  # type: ignore[attr-defined]
    send.still_valid = still_valid  # type: ignore[attr-defined]
    return send
