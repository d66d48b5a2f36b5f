"""The gateway's answer to RTCP NACKs, fed from the session's FrameStore.

It sees every decrypted RTCP datagram before aiortc (``aiortc_compat.intercept_rtcp``), takes the
generic NACKs addressed to our stream out of it and hands the rest on. Per requested sequence
number (``NackResponder`` decides, with a 40 ms -> 1 s back-off per packet):

- hit: the stored RTP packet is resent unchanged (same SSRC, seq, timestamp, payload);
- hit on speech cut off by barge-in: not resent -- a concealment packet instead;
- miss (older than the store's 5 s, or never sent): a concealment packet carrying that sequence
  number and its timestamp, whose Opus payload (a lone TOC byte, zero-length frame) makes the
  decoder run PLC, so the receiver stops asking and conceals;
- rate-limited: nothing.
A malformed RTCP datagram is counted and dropped; nothing raises into aiortc.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiortc import RTCRtpSender
from aiortc.rtp import RtpPacket

from gateway import aiortc_compat
from gateway.media import rtp_header
from gateway.media.frame_store import FrameStore, StoredPacket
from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.rtp.nack_responder import NackDecision, NackOutcome, NackResponder, concealment_payload
from gateway.rtp.rtcp_nack import MalformedRtcp, is_nack, iter_rtcp_packets, parse_nack_packet
from gateway.rtp.seqnum import seq_diff

log = logging.getLogger(__name__)


@dataclass
class RetransmissionCounters:
    nacks_received: int = 0
    seqs_requested: int = 0
    hits: int = 0  # stored packets resent
    misses: int = 0  # not in the store: answered with concealment
    rate_limited: int = 0
    cancelled: int = 0  # speech cut off by barge-in: concealment instead of a resend
    concealments_sent: int = 0
    malformed: int = 0
    foreign_ssrc: int = 0  # NACKs for a stream that is not ours
    test_dropped: int = 0  # first transmissions dropped by the test-only option


class Retransmitter:
    def __init__(
        self,
        store: FrameStore,
        is_cancelled: Callable[[StoredPacket], bool] = lambda entry: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.responder = NackResponder(store)
        self.is_cancelled = is_cancelled
        self.clock = clock
        self.counters = RetransmissionCounters()
        self._sender: RTCRtpSender | None = None
        self._ssrc: int | None = None

    def attach(self, sender: RTCRtpSender) -> None:
        """Start answering NACKs for ``sender`` (call after the remote description is set)."""
        self._sender = sender
        self._ssrc = aiortc_compat.sender_ssrc(sender)
        aiortc_compat.intercept_rtcp(sender.transport, self.on_rtcp)

    def drop_first_transmissions(self, percent: float, seed: int | None = None) -> None:
        """TEST ONLY: lose ``percent`` % of first transmissions sent through aiortc's loop."""
        assert self._sender is not None
        aiortc_compat.drop_first_transmissions(
            self._sender.transport, self.first_transmission_filter(percent, seed)
        )

    def first_transmission_filter(
        self, percent: float, seed: int | None = None
    ) -> Callable[[bytes], bool]:
        """TEST ONLY: a predicate that says to drop ``percent`` % of RTP packets (counted)."""
        rng = random.Random(seed)

        def drop(data: bytes) -> bool:
            if len(data) > 1 and 192 <= data[1] <= 223:  # RTCP (should not come this way)
                return False
            if rng.random() * 100 < percent:
                self.counters.test_dropped += 1
                return True
            return False

        return drop

    async def on_rtcp(self, data: bytes) -> bytes:
        """Consume our NACKs from a compound RTCP datagram; return what aiortc should see."""
        try:
            packets = list(iter_rtcp_packets(data))
        except MalformedRtcp:
            self.counters.malformed += 1
            return b""
        rest: list[bytes] = []
        for packet in packets:
            if not is_nack(packet):
                rest.append(packet)
                continue
            try:
                nack = parse_nack_packet(packet)
            except MalformedRtcp:
                self.counters.malformed += 1
                continue
            if nack.media_ssrc != self._ssrc:
                self.counters.foreign_ssrc += 1
                continue
            try:
                for outcome in self.responder.handle_nack(nack.seqs, self.clock()):
                    await self._answer(outcome)
            except ConnectionError:
                return b""
            except Exception:  # never let one bad request break the RTCP path
                log.exception("NACK handling failed")
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
                await aiortc_compat.send_rtp_packet(self._sender, entry.packet)
                return
            self.counters.cancelled += 1
        packet = self._concealment_for(outcome.seq)
        if packet is not None:
            await aiortc_compat.send_rtp_packet(self._sender, packet)
            self.counters.concealments_sent += 1

    def _concealment_for(self, seq: int) -> RtpPacket | bytes | None:
        """The newest packet's header (SSRC, PT, extensions) with ``seq``, the timestamp that
        sequence number had, and a concealment payload."""
        newest_seq = self.store.newest_seq
        newest = None if newest_seq is None else self.store.lookup(newest_seq)
        if newest is None:
            return None
        age = seq_diff(newest.seq, seq)
        if age < 0:  # a sequence number we have not reached: nothing to conceal
            return None
        timestamp = (newest.timestamp - age * RTP_TICKS_PER_FRAME) & 0xFFFFFFFF
        payload = concealment_payload(newest.payload[:1] or b"\x68")
        template = newest.packet
        if isinstance(template, bytes):  # the batch path stores serialized packets
            return rtp_header.rewrite(template, len(newest.payload), seq, timestamp, payload)
        packet = RtpPacket(
            payload_type=template.payload_type,
            sequence_number=seq,
            timestamp=timestamp,
            ssrc=template.ssrc,
            payload=payload,
        )
        packet.extensions = template.extensions
        return packet

    def _sync_counters(self) -> None:
        r = self.responder.counters
        c = self.counters
        c.nacks_received, c.seqs_requested = r.nacks_received, r.seqs_requested
        c.hits = r.hits - c.cancelled
        c.misses, c.rate_limited = r.misses, r.rate_limited

    def stats(self) -> dict[str, Any]:
        self._sync_counters()
        return asdict(self.counters)
