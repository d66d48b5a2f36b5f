"""The gateway's answer to RTCP NACKs, fed from the session's FrameStore.

It sees every decrypted RTCP datagram before aiortc (``aiortc_compat.intercept_rtcp``), takes the
generic NACKs addressed to our stream out of it and hands the rest on. Per requested sequence
number (``NackResponder`` decides, with a 40 ms -> 1 s back-off per packet):

- hit: the stored RTP packet is resent unchanged (same SSRC, seq, timestamp, payload);
- hit on speech cut off by barge-in: not resent -- a concealment packet instead;
- miss (older than the store's 5 s, or never sent): a concealment packet carrying that sequence
  number and its timestamp, whose Opus payload (a lone TOC byte, zero-length frame) makes the
  decoder run PLC, so the receiver stops asking and conceals -- only for a seq this stream sent
  and within SRTP's replay window (``too_old`` counts the rest, which are not answered);
- rate-limited (a resend or concealment of that seq too recently, or the per-second cap on
  answers reached): nothing.
Both send paths share this (it works on the ``RtpSink``'s store: every packet is resent as the
bytes rebuilt from the stream's header template). A malformed RTCP datagram is counted and
dropped; an answer that cannot be sent (the transport refused it, say) is counted and the rest of
the NACK is still answered; nothing raises into aiortc.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiortc import RTCRtpSender

from gateway import aiortc_compat
from gateway.media.opus_codec import RTP_CLOCK_RATE, RTP_TICKS_PER_FRAME
from gateway.nack.responder import (
    NackDecision,
    NackOutcome,
    NackResponder,
    concealment_payload,
)
from gateway.nack.rtcp import (
    MalformedRtcp,
    is_nack,
    iter_rtcp_packets,
    parse_nack_packet,
    wrap_order,
)
from gateway.nack.store import StoredPacket
from gateway.rtp import header as rtp_header
from gateway.rtp import red
from gateway.rtp.header import ntp_now
from gateway.rtp.rtcp_report import is_report, parse_report_blocks
from gateway.rtp.seqnum import seq_diff
from gateway.runtime.metrics import METRICS
from gateway.webrtc.rtp_sink import RtpSink

log = logging.getLogger(__name__)

#: aiortc's SRTP replay window (``tx_policy.window_size`` in rtcdtlstransport.py), in packets.
SRTP_REPLAY_WINDOW = 1024


@dataclass
class RetransmissionCounters:
    nacks_received: int = 0
    seqs_requested: int = 0
    hits: int = 0  # stored packets resent
    misses: int = 0  # not in the store: answered with concealment
    rate_limited: int = 0
    cancelled: int = 0  # speech cut off by barge-in: concealment instead of a resend
    concealments_sent: int = 0
    send_failed: int = 0  # answers that could not be protected or sent
    too_old: int = 0  # misses not concealed: before the stream's first packet or past SRTP's window
    reports: int = 0  # receiver report blocks about our stream
    malformed: int = 0
    foreign_ssrc: int = 0  # NACKs for a stream that is not ours
    test_dropped: int = 0  # first transmissions dropped by the test-only option


async def _send_quietly(transport: Any, packet: bytes) -> None:
    with contextlib.suppress(ConnectionError):
        await aiortc_compat.send_unprotected(transport, packet)


def longest_run(seqs: list[int]) -> int:
    """The most consecutive sequence numbers in a NACK (wrap-safe): the longest burst in it."""
    best = run = 0
    previous: int | None = None
    for seq in wrap_order(seqs):
        run = run + 1 if previous is not None and seq_diff(seq, previous) == 1 else 1
        best = max(best, run)
        previous = seq
    return best


def _cut_off(entry: StoredPacket) -> bool:
    """Speech that barge-in cut off: not worth resending."""
    owner = entry.frame.owner if entry.frame is not None else None
    return owner is not None and owner.cancelled


class Retransmitter:
    def __init__(
        self,
        sink: RtpSink,
        is_cancelled: Callable[[StoredPacket], bool] = _cut_off,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sink = sink
        self.store = sink.store
        self.responder = NackResponder(self.store)
        self.is_cancelled = is_cancelled
        self.clock = clock
        self.counters = RetransmissionCounters()
        self._sender: RTCRtpSender | None = None
        self._ssrc: int | None = None
        self._send_error_logged = False
        self._delayed: set[asyncio.TimerHandle] = set()  # test-only delayed resends
        self.rtt_s: float | None = None  # from the receiver's reports (LSR/DLSR)
        self.fraction_lost = 0.0  # the latest report's
        #: called when reported loss moved RED's state (on, until when, the distance): the
        #: leg's transmitter, whose stream C may be sending (``BatchStream.red_changed``)
        self.on_red_changed: Callable[[], None] | None = None

    def attach(self, sender: RTCRtpSender) -> None:
        """Start answering NACKs for ``sender`` (call after the remote description is set)."""
        self._sender = sender
        self._ssrc = aiortc_compat.sender_ssrc(sender)
        aiortc_compat.intercept_rtcp(sender.transport, self.on_rtcp)

    async def on_rtcp(self, data: bytes) -> bytes:
        """Consume our NACKs from a compound RTCP datagram; return what aiortc should see."""
        try:
            packets = list(iter_rtcp_packets(data))
        except MalformedRtcp:
            self.counters.malformed += 1
            return b""
        rest: list[bytes] = []
        for packet in packets:
            if is_report(packet):
                self._on_report(packet)
            if not is_nack(packet):
                rest.append(packet)  # aiortc keeps its own statistics from reports
                continue
            try:
                nack = parse_nack_packet(packet)
            except MalformedRtcp:
                self.counters.malformed += 1
                continue
            if nack.media_ssrc != self._ssrc:
                self.counters.foreign_ssrc += 1
                continue
            self._loss_reported(longest_run(nack.seqs))
            for outcome in self.responder.handle_nack(nack.seqs, self.clock()):
                try:
                    await self._answer(outcome)
                except ConnectionError:  # the transport is gone: nothing more to answer
                    self._sync_counters()
                    return b""
                except Exception:  # one answer that cannot be sent must not drop the rest
                    self.counters.send_failed += 1
                    if not self._send_error_logged:
                        self._send_error_logged = True
                        log.warning("NACK answer for seq %d not sent", outcome.seq, exc_info=True)
        self._sync_counters()
        return b"".join(rest)

    async def _answer(self, outcome: NackOutcome) -> None:
        if outcome.decision is NackDecision.RATE_LIMITED:
            return
        assert self._sender is not None
        if outcome.decision is NackDecision.HIT:
            entry = outcome.packet
            assert isinstance(entry, StoredPacket)
            if not self.is_cancelled(entry):
                lost = self.sink.drop_repair
                if lost is None or not lost():
                    await self._resend(entry.packet)
                return
            self.counters.cancelled += 1
        packet = self._concealment_for(outcome.seq)
        if packet is not None:
            await aiortc_compat.send_unprotected(self._sender.transport, packet)
            self.counters.concealments_sent += 1

    async def _resend(self, packet: bytes) -> None:
        assert self._sender is not None
        delay = self.sink.repair_delay_s
        if delay <= 0:
            await aiortc_compat.send_unprotected(self._sender.transport, packet)
            return
        # TEST ONLY: the resend leaves as late as a long round trip would bring it
        transport = self._sender.transport
        task = asyncio.get_running_loop().call_later(
            delay, lambda: asyncio.ensure_future(_send_quietly(transport, packet))
        )
        self._delayed.add(task)
        if len(self._delayed) > 256:
            self._delayed = {t for t in self._delayed if not t.cancelled()}

    def close(self) -> None:
        for handle in self._delayed:
            handle.cancel()
        self._delayed.clear()

    def _on_report(self, packet: bytes) -> None:
        """A receiver report on our stream: loss (turns adaptive RED on), jitter, RTT (the NACK
        responder's back-off follows it)."""
        try:
            blocks = parse_report_blocks(packet)
        except MalformedRtcp:
            self.counters.malformed += 1
            return
        for block in blocks:
            if block.ssrc != self._ssrc:
                continue
            self.counters.reports += 1
            rtt = block.rtt_s(ntp_now())
            if rtt is not None:
                self.rtt_s = rtt
                self.responder.rtt_s = rtt
                METRICS.rtt.observe(rtt)
            self.fraction_lost = block.fraction_lost
            METRICS.fraction_lost.observe(block.fraction_lost)
            METRICS.jitter.observe(block.jitter / RTP_CLOCK_RATE)
            if block.fraction_lost > 0:
                self._loss_reported()

    def _loss_reported(self, burst: int = 0) -> None:
        """Loss reported (a NACK with its longest run, or a report's fraction lost): RED
        told, then ``on_red_changed``."""
        red = self.sink.red
        if red is None:
            return
        now = time.monotonic()
        red.loss_reported(now)
        if burst:
            red.burst_reported(burst, now)
        if self.on_red_changed is not None:
            self.on_red_changed()

    def _concealment_for(self, seq: int) -> bytes | None:
        """The newest packet's header (SSRC, PT, extensions) with ``seq``, the timestamp that
        sequence number had, and a concealment payload."""
        newest_seq = self.store.newest_seq
        newest = None if newest_seq is None else self.store.lookup(newest_seq)
        if newest is None:
            return None
        age = seq_diff(newest.seq, seq)
        if age < 0:  # a sequence number we have not reached: nothing to conceal
            return None
        if age >= min(self.store.recorded, SRTP_REPLAY_WINDOW - 1):
            # Never protect a sequence number this stream did not send or SRTP no longer
            # accepts: libsrtp estimates its index from the last one, and a seq from before
            # the stream's first packet (while that index is below 2^15) moves the index and
            # rollover counter forward -- should that packet be lost, every later one fails
            # the listener's authentication.
            self.counters.too_old += 1
            return None
        timestamp = (newest.timestamp - age * RTP_TICKS_PER_FRAME) & 0xFFFFFFFF
        opus = newest.payload
        if newest.red:  # conceal as plain Opus: the TOC of the newest primary frame
            try:
                opus = red.primary(newest.payload)
            except red.MalformedRed:
                opus = b""
        payload = concealment_payload(opus[:1] or b"\x68")
        if newest.red:
            header = self.store.header
            if header is None:
                return None
            ast = rtp_header.abs_send_time(ntp_now()).to_bytes(3, "big")
            return header.build(seq, timestamp, ast, payload)
        return rtp_header.rewrite(newest.packet, len(newest.payload), seq, timestamp, payload)

    def _sync_counters(self) -> None:
        r = self.responder.counters
        c = self.counters
        c.nacks_received, c.seqs_requested = r.nacks_received, r.seqs_requested
        c.hits = r.hits - c.cancelled
        c.misses, c.rate_limited = r.misses, r.rate_limited
        c.test_dropped = self.sink.stats.test_dropped

    def stats(self) -> dict[str, Any]:
        self._sync_counters()
        return asdict(self.counters)
