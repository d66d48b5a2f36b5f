"""Receive-side adaptive jitter buffer for 20 ms Opus frames (one frame per RTP packet).

Driving it: call :meth:`JitterBuffer.insert` for every received RTP packet and
:meth:`JitterBuffer.pop` once per frame period (20 ms) from the playout clock; both take times in
seconds from the same monotonic clock. ``pop`` returns a :class:`PopResult`:

* ``FRAME``: decode ``payload`` normally.
* ``LOST``: the frame ``seq`` is missing at its playout time. If ``fec_payload`` (the payload of
  ``seq + 1``) is set, decode it with ``decode_fec=True`` to rebuild the lost frame from in-band
  FEC, else run PLC (decode with no data). The next ``pop`` returns ``seq + 1`` normally.
* ``UNDERRUN``: nothing to play (buffering at start, after the stream stalled, or before the first
  packet): conceal or play silence. Nothing is consumed.

Playout follows sequence numbers, not timestamps (each seq is one 20 ms frame). It starts once
``target_frames`` frames are buffered (or the oldest buffered packet has waited that long). On an
underrun it holds the playout point and buffers again; when packets resume, missing frames at the
head whose time slots already passed as underruns are skipped (counted lost) so a burst loss does
not add latency, while a pure delay spike does (nothing is dropped). The latency is trimmed back by
discarding one frame whenever the depth stays above ``target_frames`` for ``catchup_pops`` pops
in a row (the minimum depth over that time shows the excess is not just arrival phase).

The target (``min_frames``..``max_frames``) follows the ``quantile`` of the recent delay variation
(each packet's transit time minus the smallest transit in the last ``window`` packets): it grows at
once when jitter rises and shrinks by one frame per ``shrink_interval_s`` when calm. Pass
``retransmitted=True`` for NACK repairs so their extra round trip does not count as jitter.
``jitter_ms`` is the RFC 3550 interarrival jitter estimate. A transit-time jump above
``max_transit_jump_s`` (a timestamp discontinuity) restarts the delay measurement instead.

A packet ``resync_frames`` (default 250 = 5 s) or more ahead of the newest one, or three in a row
that far behind, mean the sender restarted: the buffer flushes and starts over on the new numbers.
Memory is bounded: at most ``capacity`` frames are buffered (older ones are discarded to make room)
and ``capacity`` played sequence numbers are remembered for duplicate detection.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass, replace

from gateway.rtp.seqnum import SEQ_MASK, Unwrapper


class PopKind(enum.Enum):
    FRAME = "frame"
    LOST = "lost"
    UNDERRUN = "underrun"


class InsertResult(enum.Enum):
    ACCEPTED = "accepted"
    LATE = "late"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class PopResult:
    kind: PopKind
    seq: int | None = None  # 16-bit seq of the frame played (FRAME) or missing (LOST)
    timestamp: int | None = None  # RTP timestamp (FRAME only)
    payload: bytes | None = None  # FRAME only
    fec_payload: bytes | None = None  # LOST only: payload of seq + 1, if already buffered


@dataclass
class JitterStats:
    received: int = 0  # every insert() call
    late: int = 0  # arrived after its playout point (played out as lost, or skipped)
    duplicate: int = 0
    lost: int = 0  # frames missing at playout time (concealed, FEC'd or skipped)
    dropped: int = 0  # buffered frames discarded to cut latency or on overflow
    played: int = 0
    underruns: int = 0  # transitions from playing to underrun
    resyncs: int = 0  # stream (re)starts: the first packet, and jumps of >= resync_frames
    target_frames: int = 0
    depth: int = 0  # frames from the playout point to the newest buffered frame
    jitter_ms: float = 0.0


@dataclass(slots=True)
class _Packet:
    seq: int
    timestamp: int
    payload: bytes
    arrival: float


_UNDERRUN = PopResult(PopKind.UNDERRUN)


class JitterBuffer:
    def __init__(
        self,
        *,
        min_frames: int = 2,
        max_frames: int = 5,
        capacity: int = 50,
        frame_ticks: int = 960,
        clock_rate: int = 48000,
        window: int = 50,
        quantile: float = 0.95,
        shrink_interval_s: float = 2.0,
        catchup_pops: int = 25,
        resync_frames: int = 250,
        max_transit_jump_s: float = 1.0,
    ) -> None:
        if not 1 <= min_frames <= max_frames <= capacity:
            raise ValueError("need 1 <= min_frames <= max_frames <= capacity")
        if not 0.0 <= quantile <= 1.0 or window < 1 or catchup_pops < 1:
            raise ValueError("bad quantile, window or catchup_pops")
        self._min = min_frames
        self._max = max_frames
        self._capacity = capacity
        self._frame_s = frame_ticks / clock_rate
        self._clock_rate = clock_rate
        self._quantile = quantile
        self._shrink_interval = shrink_interval_s
        self._catchup_pops = catchup_pops
        self._window = window
        self._resync_frames = max(resync_frames, capacity)
        self._max_transit_jump_s = max_transit_jump_s
        self.reset()

    def reset(self) -> None:
        """Forget the stream and restart the statistics."""
        self._stats = JitterStats()
        self._target = self._min
        self._resync()

    def _resync(self) -> None:
        """Start over on a new timeline (sender restart): keeps statistics and target."""
        self._packets: dict[int, _Packet] = {}  # unwrapped seq -> packet
        self._seqs = Unwrapper(16)
        self._tss = Unwrapper(32)
        self._next: int | None = None  # unwrapped seq to play next
        self._newest: int | None = None
        self._playing = False
        self._started = False
        self._underrun_pops = 0
        self._excess_pops = 0
        self._far_streak = 0
        self._played: deque[int] = deque(maxlen=self._capacity)
        self._played_set: set[int] = set()
        self._rebaseline()
        self._jitter = 0.0
        self._target_justified_at: float | None = None

    def _rebaseline(self) -> None:
        self._last_transit: float | None = None
        self._transits: deque[float] = deque(maxlen=self._window)
        self._variations: deque[float] = deque(maxlen=self._window)

    # -- input ----------------------------------------------------------------------------

    def insert(
        self,
        seq: int,
        timestamp: int,
        payload: bytes,
        arrival_time: float,
        *,
        retransmitted: bool = False,
    ) -> InsertResult:
        self._stats.received += 1
        seq &= SEQ_MASK
        if self._newest is not None:
            jump = self._seqs.peek(seq) - self._newest
            if jump >= self._resync_frames:
                self._stats.dropped += len(self._packets)
                self._resync()  # far ahead: whatever is buffered is stale
            elif -jump >= self._resync_frames:
                self._far_streak += 1
                if self._far_streak < 3:
                    self._stats.late += 1
                    return InsertResult.LATE
                self._stats.dropped += len(self._packets)
                self._resync()  # three in a row from far behind: the sender restarted
            else:
                self._far_streak = 0
        if self._newest is None:
            self._stats.resyncs += 1
        useq = self._seqs.unwrap(seq)
        uts = self._tss.unwrap(timestamp & 0xFFFFFFFF)
        if useq in self._packets or useq in self._played_set:
            self._stats.duplicate += 1
            return InsertResult.DUPLICATE
        if not retransmitted:
            self._measure(uts, arrival_time)
        if self._next is None:
            self._next = useq
        elif useq < self._next:
            if self._started or self._newest is None or self._newest - useq >= self._capacity:
                self._stats.late += 1
                return InsertResult.LATE
            self._next = useq  # reordered before the first frame was played
        self._packets[useq] = _Packet(seq, timestamp & 0xFFFFFFFF, payload, arrival_time)
        if self._newest is None or useq > self._newest:
            self._newest = useq
        if useq - self._next >= self._capacity:
            self._slide(useq - self._capacity + 1)
        return InsertResult.ACCEPTED

    def _slide(self, new_next: int) -> None:
        """Keep the window within capacity: discard what falls out, skip the empty head."""
        for useq in [s for s in self._packets if s < new_next]:
            del self._packets[useq]
            self._stats.dropped += 1
        self._next = min(self._packets)
        self._underrun_pops = 0

    def _measure(self, uts: int, arrival: float) -> None:
        transit = arrival - uts / self._clock_rate
        if self._last_transit is not None:
            d = abs(transit - self._last_transit)
            if d > self._max_transit_jump_s:
                self._rebaseline()  # timestamps jumped: a new timeline, not jitter
            else:
                self._jitter += (d - self._jitter) / 16.0  # RFC 3550 §6.4.1
        self._last_transit = transit
        self._transits.append(transit)
        self._variations.append(transit - min(self._transits))
        ordered = sorted(self._variations)
        variation = ordered[min(len(ordered) - 1, int(self._quantile * len(ordered)))]
        need = 1 + math.ceil(variation / self._frame_s - 1e-9)
        need = max(self._min, min(self._max, need))
        if need >= self._target:
            self._target = need
            self._target_justified_at = arrival
        elif self._target_justified_at is None:
            self._target_justified_at = arrival
        elif arrival - self._target_justified_at >= self._shrink_interval:
            self._target -= 1  # calm for a while: one frame less
            self._target_justified_at = arrival

    # -- output ---------------------------------------------------------------------------

    def pop(self, now: float) -> PopResult:
        if self._next is None:
            return _UNDERRUN
        if not self._playing and not self._try_start(now):
            return _UNDERRUN
        if not self._packets:
            self._playing = False
            self._stats.underruns += 1
            self._underrun_pops = 1
            return _UNDERRUN
        if self._depth() > self._target:
            self._excess_pops += 1
            if self._excess_pops >= self._catchup_pops:
                self._excess_pops = 0
                if self._packets.pop(self._next, None) is None:
                    self._stats.lost += 1
                else:
                    self._stats.dropped += 1
                self._next += 1
        else:
            self._excess_pops = 0
        useq = self._next
        self._next += 1
        packet = self._packets.pop(useq, None)
        if packet is None:
            self._stats.lost += 1
            fec = self._packets.get(self._next)
            return PopResult(
                PopKind.LOST, useq & SEQ_MASK, fec_payload=fec.payload if fec else None
            )
        self._stats.played += 1
        self._remember_played(useq)
        return PopResult(PopKind.FRAME, packet.seq, packet.timestamp, packet.payload)

    def _try_start(self, now: float) -> bool:
        assert self._next is not None
        if not self._packets:
            if self._started:
                self._underrun_pops += 1
            return False
        oldest = min(self._packets)
        if self._underrun_pops:
            # head frames whose slots already went by as underruns are lost: skip them
            skip = min(oldest - self._next, self._underrun_pops)
            self._next += skip
            self._stats.lost += skip
            self._underrun_pops = 0
        waited = now - min(p.arrival for p in self._packets.values())
        if self._depth() >= self._target or waited >= self._target * self._frame_s - 1e-9:
            self._playing = True
            self._started = True
            self._excess_pops = 0
            return True
        if self._started:
            self._underrun_pops += 1
        return False

    def _remember_played(self, useq: int) -> None:
        if len(self._played) == self._played.maxlen:
            self._played_set.discard(self._played[0])
        self._played.append(useq)
        self._played_set.add(useq)

    def _depth(self) -> int:
        if not self._packets or self._next is None or self._newest is None:
            return 0
        return self._newest - self._next + 1

    # -- state ----------------------------------------------------------------------------

    @property
    def playout_seq(self) -> int | None:
        """16-bit seq of the next frame to play (anything older is late); None before start."""
        return None if self._next is None else self._next & SEQ_MASK

    @property
    def target_frames(self) -> int:
        return self._target

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def stats(self) -> JitterStats:
        """A snapshot of the counters and gauges."""
        return replace(
            self._stats,
            target_frames=self._target,
            depth=self._depth(),
            jitter_ms=self._jitter * 1000.0,
        )
