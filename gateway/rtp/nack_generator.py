"""Receiver-side NACK generator: which missing RTP packets to ask for, and when.

Feed it every received packet with :meth:`NackGenerator.on_packet` and call
:meth:`NackGenerator.poll` periodically (each 20 ms frame is fine); ``poll`` returns the 16-bit
sequence numbers to put into one generic NACK (``gateway.rtp.rtcp_nack.build_nack_packet``), oldest
first, or an empty list.

A gap in the sequence numbers marks packets missing. Each is requested at most ``max_retries``
times, at least ``max(rtt, min_interval_s)`` apart, and only while it can still be played: it is
forgotten once it is more than ``window_frames`` behind the newest packet (≈200 ms by default) or
behind the playout point passed to ``poll``. At most ``max_tracked`` are tracked. A packet that
arrives after being NACKed counts as recovered, and ``on_packet`` returns True for it (pass that to
the jitter buffer as ``retransmitted``). Unless ``auto_rtt`` is off, the RTT estimate follows the
time from a single NACK to its repair (Karn: never from packets asked for twice).

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
    given_up: int = 0  # missing ones forgotten without arriving
    missing: int = 0  # currently tracked
    rtt_ms: float = 0.0


@dataclass(slots=True)
class _Missing:
    detected_at: float
    retries: int = 0
    first_sent: float | None = None
    last_sent: float | None = None


class NackGenerator:
    def __init__(
        self,
        *,
        window_frames: int = 10,
        max_retries: int = 3,
        max_tracked: int = 256,
        rtt_s: float = 0.1,
        min_interval_s: float = 0.02,
        initial_delay_s: float = 0.0,
        auto_rtt: bool = True,
        resync_frames: int = 1000,
    ) -> None:
        if window_frames < 1 or max_retries < 1 or max_tracked < 1:
            raise ValueError("window_frames, max_retries and max_tracked must be >= 1")
        if rtt_s < 0 or min_interval_s < 0 or initial_delay_s < 0:
            raise ValueError("times must be >= 0")
        self._window = window_frames
        self._max_retries = max_retries
        self._max_tracked = max_tracked
        self._rtt = rtt_s
        self._min_interval = min_interval_s
        self._initial_delay = initial_delay_s
        self._auto_rtt = auto_rtt
        self._resync_frames = max(resync_frames, window_frames)
        self._stats = NackGeneratorStats()
        self._restart()

    def _restart(self) -> None:
        self._stats.given_up += len(getattr(self, "_missing", ()))
        self._seqs = Unwrapper(16)
        self._newest: int | None = None
        self._missing: dict[int, _Missing] = {}  # unwrapped seq -> state, ascending
        self._far_streak = 0

    def on_packet(self, seq: int, now: float) -> bool:
        """Record a received packet; True when it is a repair of a NACKed packet."""
        seq &= SEQ_MASK
        if self._newest is None:
            self._newest = self._seqs.unwrap(seq)
            return False
        jump = self._seqs.peek(seq) - self._newest
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
        useq = self._seqs.unwrap(seq)
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
            self._rtt += (now - state.first_sent - self._rtt) / 8.0
        return True

    def poll(self, now: float, playout_seq: int | None = None) -> list[int]:
        """Sequence numbers to NACK now (oldest first); ``playout_seq``: next seq to be played."""
        self._prune(playout_seq)
        interval = max(self._rtt, self._min_interval)
        out: list[int] = []
        for useq, state in self._missing.items():
            if state.retries >= self._max_retries or now - state.detected_at < self._initial_delay:
                continue
            if state.last_sent is not None and now - state.last_sent < interval:
                continue
            state.retries += 1
            state.last_sent = now
            if state.first_sent is None:
                state.first_sent = now
            out.append(useq & SEQ_MASK)
        if out:
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

    def set_rtt(self, rtt_s: float) -> None:
        """Use an externally measured round-trip time (e.g. from RTCP sender/receiver reports)."""
        if rtt_s < 0:
            raise ValueError("rtt must be >= 0")
        self._rtt = rtt_s

    @property
    def rtt_s(self) -> float:
        return self._rtt

    @property
    def missing(self) -> list[int]:
        """Tracked missing sequence numbers, oldest first."""
        return [useq & SEQ_MASK for useq in self._missing]

    @property
    def stats(self) -> NackGeneratorStats:
        return replace(self._stats, missing=len(self._missing), rtt_ms=self._rtt * 1000.0)
