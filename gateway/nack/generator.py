"""Receiver-side NACK generator: which missing RTP packets to ask for, and when.

Feed it every received packet with :meth:`NackGenerator.on_packet` and call
:meth:`NackGenerator.poll` when :meth:`NackGenerator.next_due` says something is due (or on
each playout period); ``poll`` returns the 16-bit sequence numbers to put into one generic NACK
(``gateway.nack.rtcp.build_nack_packet``), oldest first, or an empty list.

A gap in the sequence numbers marks packets missing. Each is requested at most ``max_retries``
times and only while it can still be played: it is forgotten once it is more than
``window_frames`` behind the newest packet (≈200 ms by default) or behind the playout point
passed to ``poll``. At most ``max_tracked`` are tracked. A packet that arrives after being
NACKed counts as recovered, and ``on_packet`` returns True for it (pass that to the jitter
buffer as ``retransmitted``); one rebuilt some other way (RFC 2198 redundancy) is passed to
:meth:`NackGenerator.on_recovered`, which stops asking for it without taking an RTT sample.

Retries are RTT-aware: a packet is asked for again ``rtt_factor`` (1.5) round trips after the
last request (never sooner than ``min_interval_s``). The sender answers a repeated NACK once
1.25 RTT have passed since its answer (``nack_responder``), so a retry 1.5 RTT after ours reaches
it after its back-off: the answer was lost, not merely on its way. The RTT is the time from a
NACK to its repair (Karn: only packets asked for once count); the first sample replaces the
initial guess, later ones are smoothed (1/8), each bounded by ``max_rtt_s``; ``set_rtt`` sets it
from elsewhere (RTCP reports). Two token buckets bound the traffic whatever the loss:
``max_nacks_per_s`` NACK packets and ``max_seqs_per_s`` sequence numbers per second (bursts of
``burst_s`` seconds' worth); what the cap holds back stays due, oldest first, and is counted in
``capped``.

A packet ``resync_frames`` ahead of the newest, or three in a row that far behind, is taken as a
sender restart: tracking starts over.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gateway.rtp.seqnum import SEQ_MASK, Unwrapper


@dataclass
class NackGeneratorStats:
    nacks_sent: int = 0  # non-empty poll() results
    seqs_requested: int = 0  # sequence numbers in them, retries included
    recovered: int = 0  # NACKed sequence numbers that arrived later
    cancelled: int = 0  # missing ones rebuilt otherwise (RED) before they were all asked for
    given_up: int = 0  # missing ones forgotten without arriving
    capped: int = 0  # due requests the per-second caps held back (each poll counts them)
    missing: int = 0  # currently tracked
    rtt_samples: int = 0
    rtt_ms: float = 0.0


@dataclass(slots=True)
class _Missing:
    detected_at: float
    retries: int = 0
    first_sent: float | None = None
    last_sent: float | None = None


class _Bucket:
    """A token bucket: ``rate`` per second, at most ``size`` saved up."""

    __slots__ = ("_at", "rate", "size", "tokens")

    def __init__(self, rate: float, size: float) -> None:
        self.rate = rate
        self.size = size
        self.tokens = size
        self._at: float | None = None

    def refill(self, now: float) -> float:
        if self._at is not None and now > self._at:
            self.tokens = min(self.size, self.tokens + (now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)
        return self.tokens

    def ready_at(self, now: float) -> float:
        """When one token will be there."""
        tokens = self.refill(now)
        return now if tokens >= 1.0 else now + (1.0 - tokens) / self.rate


class NackGenerator:
    def __init__(
        self,
        *,
        window_frames: int = 10,
        max_retries: int = 3,
        max_tracked: int = 256,
        rtt_s: float = 0.1,
        rtt_factor: float = 1.5,
        min_interval_s: float = 0.02,
        max_rtt_s: float = 1.0,
        max_nacks_per_s: float = 50.0,
        max_seqs_per_s: float = 200.0,
        burst_s: float = 0.1,
        initial_delay_s: float = 0.0,
        auto_rtt: bool = True,
        resync_frames: int = 1000,
    ) -> None:
        if window_frames < 1 or max_retries < 1 or max_tracked < 1:
            raise ValueError("window_frames, max_retries and max_tracked must be >= 1")
        if rtt_s < 0 or min_interval_s < 0 or initial_delay_s < 0 or max_rtt_s <= 0:
            raise ValueError("times must be >= 0 (max_rtt_s > 0)")
        if rtt_factor <= 0 or max_nacks_per_s <= 0 or max_seqs_per_s <= 0 or burst_s <= 0:
            raise ValueError("rtt_factor, the per-second caps and burst_s must be > 0")
        self._window = window_frames
        self._max_retries = max_retries
        self._max_tracked = max_tracked
        self._rtt = min(rtt_s, max_rtt_s)
        self._rtt_measured = False
        self._rtt_factor = rtt_factor
        self._min_interval = min_interval_s
        self._max_rtt = max_rtt_s
        self._initial_delay = initial_delay_s
        self._auto_rtt = auto_rtt
        self._resync_frames = max(resync_frames, window_frames)
        self._nack_bucket = _Bucket(max_nacks_per_s, max(1.0, max_nacks_per_s * burst_s))
        self._seq_bucket = _Bucket(max_seqs_per_s, max(1.0, max_seqs_per_s * burst_s))
        self._stats = NackGeneratorStats()
        self._restart()

    def _restart(self) -> None:
        self._stats.given_up += len(getattr(self, "_missing", ()))
        self._seqs = Unwrapper(16)
        self._newest: int | None = None
        self._missing: dict[int, _Missing] = {}  # unwrapped seq -> state, ascending
        self._far_streak = 0

    # -- input ----------------------------------------------------------------------------

    def on_packet(self, seq: int, now: float) -> bool:
        """Record a received packet; True when it is a repair of a NACKed packet."""
        seq &= SEQ_MASK
        if self._newest is None:
            self._newest = self._seqs.unwrap(seq)
            return False
        # (``unwrap``, not ``peek``: the same number, and one far behind the newest leaves the
        # unwrapper where it was either way -- it only moves forward)
        useq = self._seqs.unwrap(seq)
        jump = useq - self._newest
        if -jump >= self._resync_frames:
            self._far_streak += 1
            if self._far_streak < 3:
                return False
            jump = self._resync_frames  # believe the restart
        else:
            self._far_streak = 0
        if jump >= self._resync_frames:
            self._restart()
            self._newest = self._seqs.unwrap(seq)
            return False
        if useq > self._newest:
            first_missing = max(self._newest + 1, useq - self._window)
            for missing in range(first_missing, useq):
                self._missing[missing] = _Missing(now)
            self._newest = useq
            self._prune(None)
            return False
        state = self._missing.pop(useq, None)
        if state is None or state.retries == 0:
            return False  # duplicate, or reordered before we asked
        self._stats.recovered += 1
        if self._auto_rtt and state.retries == 1 and state.first_sent is not None:
            self._rtt_sample(now - state.first_sent)
        return True

    def on_recovered(self, seq: int) -> bool:
        """``seq`` was rebuilt without a retransmission (RED): stop asking for it. True when it
        was still tracked. No RTT sample: nothing came back for a NACK."""
        if self._newest is None:
            return False
        state = self._missing.pop(self._seqs.peek(seq & SEQ_MASK), None)
        if state is None:
            return False
        self._stats.cancelled += 1
        return True

    def _rtt_sample(self, sample: float) -> None:
        sample = min(max(sample, 0.0), self._max_rtt)
        self._stats.rtt_samples += 1
        if not self._rtt_measured:
            self._rtt_measured = True
            self._rtt = sample  # the initial value was a guess
        else:
            self._rtt += (sample - self._rtt) / 8.0

    # -- output ---------------------------------------------------------------------------

    @property
    def retry_interval_s(self) -> float:
        """How long after a request the same packet is asked for again."""
        return max(self._rtt_factor * self._rtt, self._min_interval)

    def _due_at(self, state: _Missing) -> float | None:
        if state.retries >= self._max_retries:
            return None
        if state.last_sent is None:
            return state.detected_at + self._initial_delay
        return state.last_sent + self.retry_interval_s

    def next_due(self, now: float) -> float | None:
        """When the next request is due (caps included); None when nothing will be."""
        due = min((d for s in self._missing.values() if (d := self._due_at(s)) is not None),
                  default=None)
        if due is None:
            return None
        return max(due, self._nack_bucket.ready_at(now), self._seq_bucket.ready_at(now))

    def poll(self, now: float, playout_seq: int | None = None) -> list[int]:
        """Sequence numbers to NACK now (oldest first); ``playout_seq``: next seq to be played."""
        self._prune(playout_seq)
        due = [(useq, s) for useq, s in self._missing.items()
               if (at := self._due_at(s)) is not None and now >= at - 1e-9]
        if not due:
            return []
        if self._nack_bucket.refill(now) < 1.0:
            self._stats.capped += len(due)
            return []
        allowed = min(len(due), int(self._seq_bucket.refill(now)))
        self._stats.capped += len(due) - allowed
        if not allowed:
            return []
        out: list[int] = []
        for useq, state in due[:allowed]:
            state.retries += 1
            state.last_sent = now
            if state.first_sent is None:
                state.first_sent = now
            out.append(useq & SEQ_MASK)
        self._nack_bucket.tokens -= 1.0
        self._seq_bucket.tokens -= len(out)
        self._stats.nacks_sent += 1
        self._stats.seqs_requested += len(out)
        return out

    def _prune(self, playout_seq: int | None) -> None:
        if self._newest is None or not self._missing:
            return
        oldest_useful = self._newest - self._window
        if playout_seq is not None:
            playout = self._seqs.peek(playout_seq & SEQ_MASK)
            if playout <= self._newest + 1:
                oldest_useful = max(oldest_useful, playout)
        while self._missing:
            useq = next(iter(self._missing))
            if useq >= oldest_useful and len(self._missing) <= self._max_tracked:
                break
            del self._missing[useq]
            self._stats.given_up += 1

    # -- state ----------------------------------------------------------------------------

    def set_rtt(self, rtt_s: float) -> None:
        """Use an externally measured round-trip time (e.g. from RTCP sender/receiver reports)."""
        if rtt_s < 0:
            raise ValueError("rtt must be >= 0")
        self._rtt = min(rtt_s, self._max_rtt)
        self._rtt_measured = True

    @property
    def rtt_s(self) -> float:
        return self._rtt

    @property
    def rtt_measured(self) -> bool:
        """The RTT is a measurement (a repair's, or ``set_rtt``), not the initial guess."""
        return self._rtt_measured

    @property
    def window_frames(self) -> int:
        """How far behind the newest packet a missing one is still asked for."""
        return self._window

    @window_frames.setter
    def window_frames(self, frames: int) -> None:
        """Widen (or narrow) the window, e.g. to the jitter buffer's depth: a packet the buffer
        can still play is worth asking for however long the burst before it was."""
        if frames < 1:
            raise ValueError("window_frames must be >= 1")
        self._window = frames
        self._resync_frames = max(self._resync_frames, frames)

    @property
    def missing(self) -> list[int]:
        """Tracked missing sequence numbers, oldest first."""
        return [useq & SEQ_MASK for useq in self._missing]

    @property
    def stats(self) -> NackGeneratorStats:
        return replace(self._stats, missing=len(self._missing), rtt_ms=self._rtt * 1000.0)
