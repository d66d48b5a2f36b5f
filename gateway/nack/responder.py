"""Sender-side NACK responder policy (independent of aiortc and of the packet store).

For every sequence number a receiver asks for, :class:`NackResponder` decides:

* ``HIT``: the store holds the packet and it was not resent too recently: resend it.
* ``MISS``: the store has no packet for it (never sent, or already evicted). aiortc ignores misses;
  the gateway may answer with :func:`concealment_payload` so the receiver stops asking.
* ``RATE_LIMITED``: the same sequence number was answered (resent, or concealed for a miss) less
  than its back-off ago, it was answered ``max_answers_per_packet`` times already, or the
  per-second cap on answers is used up. The back-off doubles on each answer up to 1 s (as Janus
  does); it starts at 40 ms, or -- once the receiver's reports give the round-trip time
  (``rtt_s``) -- at 1.25 RTT (at least 5 ms): a repeated NACK that comes a round trip after our
  resend means the resend was lost in the same burst, and waiting a fixed 40 ms would only delay
  the repair. The per-packet count and the cap (a token bucket, ``max_answers_per_s`` with a
  burst of as many) bound what a receiver that keeps losing, or a storm of NACKs for ever new
  sequence numbers, can cost.

The store's ``lookup(seq)`` must return the packet *for that exact sequence number* or ``None``
(a ring keyed by ``seq % N`` must check the stored seq). Back-off state forgets a seq after it
has been idle for 6 s (longer than the store keeps it) and is capped at ``max_tracked`` entries.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from gateway.nack.rtcp import MalformedRtcp, parse_nack_packet
from gateway.rtp.seqnum import SEQ_MASK


class PacketStore(Protocol):
    def lookup(self, seq: int) -> object | None: ...


class NackDecision(enum.Enum):
    HIT = "hit"
    MISS = "miss"
    RATE_LIMITED = "rate_limited"


@dataclass(frozen=True, slots=True)
class NackOutcome:
    seq: int
    decision: NackDecision
    packet: object | None = None  # the stored packet, for HIT only


@dataclass
class NackCounters:
    nacks_received: int = 0
    seqs_requested: int = 0
    hits: int = 0
    misses: int = 0
    rate_limited: int = 0  # includes ``capped``
    capped: int = 0  # refused by the per-second cap
    malformed: int = 0


@dataclass(slots=True)
class _Backoff:
    last_sent: float
    backoff: float
    answers: int = 1


class NackResponder:
    def __init__(
        self,
        store: PacketStore,
        *,
        initial_backoff_s: float = 0.040,
        max_backoff_s: float = 1.0,
        max_tracked: int = 512,
        max_answers_per_s: float = 250.0,
        max_answers_per_packet: int = 6,
    ) -> None:
        if not 0 < initial_backoff_s <= max_backoff_s:
            raise ValueError("need 0 < initial_backoff_s <= max_backoff_s")
        if max_tracked < 1:
            raise ValueError("max_tracked must be >= 1")
        if max_answers_per_s < 1:
            raise ValueError("max_answers_per_s must be at least 1 (a bucket of one token)")
        self._store = store
        self._initial = initial_backoff_s
        self._max = max_backoff_s
        self._max_tracked = max_tracked
        # kept past the store's 5 s, so the per-packet cap holds for a packet's whole life
        self._forget_after = max(2 * max_backoff_s, 6.0)
        self._resent: OrderedDict[int, _Backoff] = OrderedDict()  # oldest answer first
        self._rate = max_answers_per_s
        self._tokens = max_answers_per_s
        self._refilled_at: float | None = None
        self._per_packet = max_answers_per_packet
        self.rtt_s: float | None = None  # set from the receiver's reports, when known
        self.counters = NackCounters()

    def handle_packet(self, packet: bytes, now: float) -> list[NackOutcome]:
        """Decode one RTCP generic NACK packet and decide on each seq; malformed → counted, []."""
        try:
            nack = parse_nack_packet(packet)
        except MalformedRtcp:
            self.counters.malformed += 1
            return []
        return self.handle_nack(nack.seqs, now)

    def handle_nack(self, seqs: Iterable[int], now: float) -> list[NackOutcome]:
        """Decide on every sequence number of one received NACK (duplicates are answered once)."""
        self.counters.nacks_received += 1
        self._expire(now)
        outcomes: list[NackOutcome] = []
        seen: set[int] = set()
        for seq in seqs:
            seq &= SEQ_MASK
            if seq in seen:
                continue
            seen.add(seq)
            outcomes.append(self._decide(seq, now))
        return outcomes

    def forget(self, seq: int) -> None:
        """Drop back-off state for ``seq`` (e.g. when the store overwrites that slot)."""
        self._resent.pop(seq & SEQ_MASK, None)

    @property
    def tracked(self) -> int:
        return len(self._resent)

    def _decide(self, seq: int, now: float) -> NackOutcome:
        self.counters.seqs_requested += 1
        state = self._resent.get(seq)
        if state is not None and (
            now - state.last_sent < state.backoff or state.answers >= self._per_packet
        ):
            self.counters.rate_limited += 1
            return NackOutcome(seq, NackDecision.RATE_LIMITED)
        if not self._take_token(now):
            self.counters.rate_limited += 1
            self.counters.capped += 1
            return NackOutcome(seq, NackDecision.RATE_LIMITED)
        if state is None:
            state = _Backoff(now, self._first_backoff())
            self._resent[seq] = state
            while len(self._resent) > self._max_tracked:
                self._resent.popitem(last=False)
        else:
            state.last_sent = now
            state.backoff = min(state.backoff * 2, self._max)
            state.answers += 1
            self._resent.move_to_end(seq)
        packet = self._store.lookup(seq)
        if packet is None:
            self.counters.misses += 1
            return NackOutcome(seq, NackDecision.MISS)
        self.counters.hits += 1
        return NackOutcome(seq, NackDecision.HIT, packet)

    def _first_backoff(self) -> float:
        if self.rtt_s is None:
            return self._initial
        return min(self._initial, max(0.005, 1.25 * self.rtt_s))

    def _take_token(self, now: float) -> bool:
        if self._refilled_at is not None:
            elapsed = max(0.0, now - self._refilled_at)
            self._tokens = min(self._rate, self._tokens + elapsed * self._rate)
        self._refilled_at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _expire(self, now: float) -> None:
        while self._resent:
            seq, state = next(iter(self._resent.items()))
            if now - state.last_sent < self._forget_after:
                break
            del self._resent[seq]


def concealment_payload(toc_of: bytes) -> bytes:
    """A one-byte Opus packet that makes a decoder conceal one frame of the same duration.

    It keeps the configuration and stereo bits of ``toc_of[0]`` (any Opus packet, or just its TOC
    byte) and sets frame-count code 0 (one frame), with no frame data. RFC 6716 §3.2.1 allows a
    zero-length frame and says to treat it as lost (DTX); libopus (checked with 1.6.1) decodes such
    a packet through its PLC and returns one frame's worth of samples (480 at 24 kHz for 20 ms).
    Code 1 or 2 would announce two frames and code 3 needs a frame-count byte (0 frames is invalid).
    """
    if not toc_of:
        raise ValueError("need an Opus packet (at least its TOC byte)")
    return bytes([toc_of[0] & 0xFC])
