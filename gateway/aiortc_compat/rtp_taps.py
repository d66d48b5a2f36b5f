"""RTP/RTCP taps on aiortc's senders and receivers: the retransmission history, the
negotiated codecs, raw RTP taps, RTCP interception, raw sends past SRTP, our receiver's RTCP."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import aiortc.rtcdtlstransport
import aiortc.rtcrtpsender
from aiortc import (
    RTCDtlsTransport,
    RTCRtpReceiver,
    RTCRtpSender,
    RTCRtpTransceiver,
)
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from gateway.aiortc_compat._common import _ORIGINAL_SEND_RTP, _require

_SENDER_HISTORY = "_RTCRtpSender__rtp_history"
_RECEIVER_JITTER_BUFFER = "_RTCRtpReceiver__jitter_buffer"


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



# --- receiver: raw RTP taps (our own receive path) --------------------------------------------


class _DiscardJitterBuffer:
    """Stands in for aiortc's audio jitter buffer: nothing reaches aiortc's decoder thread."""

    def add(self, packet: Any) -> tuple[bool, None]:
        return False, None


RtpTap = Callable[[Any, int], None]
#: The tap ``tap_rtp`` installed, kept on the receiver for the receive fast path (rx_fast.py)
RTP_TAP = "_gateway_rtp_tap"


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
    setattr(receiver, RTP_TAP, tap)


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
