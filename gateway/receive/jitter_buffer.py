"""Receive-side adaptive jitter buffer for Opus over RTP: one slot per sequence number.

Driving it: call :meth:`JitterBuffer.insert` for every received RTP packet (with its duration in
RTP ticks when known: ``opus_packet.packet_ticks``) and :meth:`JitterBuffer.pop` whenever the
decoded audio runs short of a playout period (20 ms): once per period for 20 ms packets, twice
for 10 ms ones, every third period for 60 ms ones, and once per period while it underruns.
Both take times in seconds from the same monotonic clock. ``pop`` returns a :class:`PopResult`:

* ``FRAME``: decode ``payload`` normally. ``ts_gap`` is how far (RTP ticks) its timestamp jumped
  past the end of the previous slot with no sequence gap: the sender paused (DTX, mute).
* ``LOST``: the slot ``seq`` is missing at its playout time; ``duration`` is its length as the
  timestamps around it tell (else the stream's packet duration). If ``fec_payload`` (the payload
  of ``seq + 1``) is set, decode it with ``decode_fec=True`` to rebuild the lost slot from
  in-band FEC, else run PLC for ``duration``. The next ``pop`` returns ``seq + 1`` normally.
* ``UNDERRUN``: nothing to play (buffering at start, after the stream stalled or paused, or
  before the first packet): conceal or play silence. Nothing is consumed.

Playout follows sequence numbers, not timestamps: a sender that pauses (DTX sends one packet
per 400 ms, mute sends none for seconds) makes the buffer run dry and start over when packets
come back, never conceal or count the pause as loss; a timestamp jump between buffered packets
is not filled with silence either (it would only add latency). Durations are in RTP ticks and
targets in frames of ``frame_ticks`` (20 ms): a slot counts for its own duration, so 10 to
60 ms packets buffer the same time. Playout starts once ``target_frames`` are buffered (or the
oldest buffered packet has waited that long). On an underrun it holds the playout point and
buffers again; when packets resume, missing slots at the head whose time already passed as
underruns are skipped (counted lost) so a burst loss does not add latency, while a pure delay
spike does (nothing is dropped), and so does a repair (a NACK answer, a RED copy) that comes
before the resumption (measured: a repaired frame played late beats a skipped one on PESQ, the
receive path then keeps the latency as depth for the next burst). A resumption whose first
packet jumped in timestamp with no sequence gap counts as a pause (``pauses``), not a stall.
The latency is trimmed back by discarding the head slot whenever dropping it still leaves
``target_frames`` buffered for ``catchup_pops`` frames of playout in a row (the minimum depth
over that time shows the excess is not just arrival phase).

The target follows the recent delay variation (:class:`JitterTarget`: ``min_frames`` ..
``max_frames``, never less than one packet more than the one being played, so 3 frames for
40 ms packets and 4 for 60 ms ones; fast up, one frame per ``shrink_interval_s`` down). Pass
``retransmitted=True`` for NACK repairs so their extra round trip does not count as jitter.
``jitter_ms`` is the RFC 3550 interarrival jitter estimate.

A packet ``resync_frames`` (default 250) or more sequence numbers ahead of the newest one, or
three in a row that far behind, mean the sender restarted: the buffer flushes and starts over on
the new numbers. Memory is bounded: at most ``capacity`` packets are buffered (older ones are
discarded to make room) and ``capacity`` played sequence numbers are remembered for duplicate
detection.

The window of slots (what is buffered, the playout point, lengths and depth, what was played)
is ``slot_window.SlotWindow``; the target depth ``jitter_target.JitterTarget``; this module is
the ingest (resync, duplicates, lateness) and the playout policy (start, underrun, skip, trim).
"""

from __future__ import annotations

import functools
from dataclasses import replace

from gateway.receive.jitter_target import JitterTarget
from gateway.receive.jitter_types import (
    UNDERRUN,
    InsertResult,
    JitterStats,
    Packet,
    PopKind,
    PopResult,
    SlotState,
)
from gateway.receive.opus_packet import MAX_PACKET_TICKS
from gateway.receive.slot_window import SlotWindow
from gateway.rtp.seqnum import SEQ_MASK, Unwrapper

__all__ = ["InsertResult", "JitterBuffer", "JitterStats", "PopKind", "PopResult", "SlotState"]


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
        self._capacity = capacity
        self._frame_ticks = frame_ticks
        self._frame_s = frame_ticks / clock_rate
        self._catchup_ticks = catchup_pops * frame_ticks
        self._resync_frames = max(resync_frames, capacity)
        self._min_frames = min_frames
        self._new_target = functools.partial(
            JitterTarget,
            max_frames=max_frames,
            frame_ticks=frame_ticks,
            clock_rate=clock_rate,
            window=window,
            quantile=quantile,
            shrink_interval_s=shrink_interval_s,
            max_transit_jump_s=max_transit_jump_s,
        )
        self.reset()

    def reset(self) -> None:
        """Forget the stream and restart the statistics."""
        self._stats = JitterStats()
        self._delay = self._new_target(min_frames=self._min_frames)
        self._packet_ticks = self._frame_ticks  # the stream's packet duration (the newest's)
        self._resync()

    def _resync(self) -> None:
        """Start over on a new timeline (sender restart): keeps statistics and target."""
        self._window = SlotWindow(self._capacity)
        self._seqs = Unwrapper(16)
        self._tss = Unwrapper(32)
        self._playing = False
        self._started = False
        self._resumed = False  # playing again after an underrun, nothing played since
        self._underrun_since: float | None = None  # unplayed pops since then, not yet skipped
        self._excess_ticks = 0
        self._far_streak = 0
        self._delay.restart()

    # -- input ----------------------------------------------------------------------------

    def insert(
        self,
        seq: int,
        timestamp: int,
        payload: bytes,
        arrival_time: float,
        *,
        retransmitted: bool = False,
        duration: int | None = None,
    ) -> InsertResult:
        """``duration``: the packet's length in RTP ticks (None: the stream's so far)."""
        self._stats.received += 1
        seq &= SEQ_MASK
        w = self._window
        useq: int | None = None
        if w.newest is not None:
            # (``unwrap``, not ``peek``: the same number, and a packet far behind the newest
            # leaves the unwrapper where it was either way -- it only moves forward)
            useq = self._seqs.unwrap(seq)
            jump = useq - w.newest
            if jump >= self._resync_frames:
                self._stats.dropped += len(w.packets)
                self._resync()  # far ahead: whatever is buffered is stale
                useq = None
            elif -jump >= self._resync_frames:
                self._far_streak += 1
                if self._far_streak < 3:
                    self._stats.late += 1
                    return InsertResult.LATE
                self._stats.dropped += len(w.packets)
                self._resync()  # three in a row from far behind: the sender restarted
                useq = None
            else:
                self._far_streak = 0
            w = self._window
        if useq is None:  # (a new timeline: its first number)
            self._stats.resyncs += 1
            useq = self._seqs.unwrap(seq)
        uts = self._tss.unwrap(timestamp & 0xFFFFFFFF)
        if useq in w.packets or useq in w.played_set:
            self._stats.duplicate += 1
            return InsertResult.DUPLICATE
        if duration is not None and 0 < duration <= MAX_PACKET_TICKS:
            self._packet_ticks = duration
        ticks = self._packet_ticks if duration is None else max(1, duration)
        if not retransmitted:
            self._delay.measure(uts, arrival_time, self._packet_ticks)
        if w.next is None:
            w.next = useq
        elif useq < w.next:
            if self._started or w.newest is None or w.newest - useq >= self._capacity:
                self._stats.late += 1
                return InsertResult.LATE
            w.next = useq  # reordered before the first frame was played
        w.add(useq, Packet(seq, timestamp & 0xFFFFFFFF, uts, ticks, payload, arrival_time))
        if useq - w.next >= self._capacity:
            self._stats.dropped += w.slide(useq - self._capacity + 1)
            self._underrun_since = None
        return InsertResult.ACCEPTED

    # -- output ---------------------------------------------------------------------------

    def pop(self, now: float) -> PopResult:
        w = self._window
        if w.next is None:
            return UNDERRUN
        if not self._playing and not self._try_start(now):
            return UNDERRUN
        if not w.packets:
            self._playing = False
            self._stats.underruns += 1
            self._underrun_since = now
            return UNDERRUN
        head = w.slot_ticks(w.next, self._packet_ticks)
        if w.depth_ticks(self._packet_ticks) - head >= self._delay.target * self._frame_ticks:
            self._excess_ticks += head
            if self._excess_ticks >= self._catchup_ticks:
                self._excess_ticks = 0
                self._discard_head(head)
        else:
            self._excess_ticks = 0
        return self._play_head()

    def _discard_head(self, ticks: int) -> None:
        """Drop the head slot to cut latency (one more than the target stayed buffered)."""
        w = self._window
        assert w.next is not None
        packet = w.take(w.next)
        if packet is None:
            self._stats.lost += 1
            w.remember(w.next, lost=True)
        else:
            self._stats.dropped += 1
        w.advance_end(packet, ticks)
        w.next += 1

    def _play_head(self) -> PopResult:
        w = self._window
        assert w.next is not None
        useq = w.next
        w.next += 1
        resumed, self._resumed = self._resumed, False
        packet = w.take(useq)
        if packet is None:
            self._stats.lost += 1
            w.remember(useq, lost=True)
            ticks = w.missing_ticks(useq, self._packet_ticks)
            w.advance_end(None, ticks)
            fec = w.packets.get(w.next)
            return PopResult(
                PopKind.LOST,
                useq & SEQ_MASK,
                fec_payload=fec.payload if fec else None,
                duration=ticks,
            )
        gap = w.ts_gap(packet, self._packet_ticks)
        if resumed and gap:
            self._stats.pauses += 1
        w.advance_end(packet, packet.duration)
        self._stats.played += 1
        w.remember(useq)
        return PopResult(
            PopKind.FRAME,
            packet.seq,
            packet.timestamp,
            packet.payload,
            duration=packet.duration,
            ts_gap=gap,
        )

    def _try_start(self, now: float) -> bool:
        w = self._window
        assert w.next is not None
        if not w.packets:
            if self._started and self._underrun_since is None:
                self._underrun_since = now
            return False
        if self._underrun_since is not None:
            self._skip_passed(now)
        waited = now - min(p.arrival for p in w.packets.values())
        target = self._delay.target
        deep_enough = w.depth_ticks(self._packet_ticks) >= target * self._frame_ticks
        if deep_enough or waited >= target * self._frame_s - 1e-9:
            self._resumed = self._started
            self._playing = True
            self._started = True
            self._excess_ticks = 0
            self._underrun_since = None
            return True
        if self._started and self._underrun_since is None:
            self._underrun_since = now
        return False

    def _skip_passed(self, now: float) -> None:
        """Skip the missing head slots whose time already went by as underruns (lost)."""
        w = self._window
        assert w.next is not None and self._underrun_since is not None
        periods = round((now - self._underrun_since) / self._frame_s)
        self._underrun_since = None
        budget = periods * self._frame_ticks
        oldest = min(w.packets)
        while w.next < oldest:
            ticks = w.missing_ticks(w.next, self._packet_ticks)
            if ticks > budget:
                break
            budget -= ticks
            w.advance_end(None, ticks)
            w.remember(w.next, lost=True)
            w.next += 1
            self._stats.lost += 1

    # -- state ----------------------------------------------------------------------------

    def slot_state(self, seq: int) -> SlotState:
        """Whether the slot ``seq`` could still take a packet (a redundant copy, say)."""
        w = self._window
        if w.newest is None or w.next is None:
            return SlotState.AHEAD
        useq = self._seqs.peek(seq & SEQ_MASK)
        if useq in w.packets or useq in w.played_set:
            return SlotState.HELD
        if useq > w.newest:
            return SlotState.AHEAD
        if useq < w.next:
            return SlotState.LATE if useq in w.lost_set else SlotState.PASSED
        return SlotState.MISSING

    def set_min_frames(self, frames: int, *, release: bool = False) -> None:
        """Raise (or lower) the target's floor, e.g. to let RED's oldest copy or a burst's NACK
        repairs come in time; the target follows at once when raised, and when lowered with
        ``release`` (else it shrinks a frame per ``shrink_interval_s``; either way the next
        packet raises it again to what jitter needs). The floor may exceed ``max_frames``
        (which bounds what jitter alone makes the target), not ``capacity``."""
        if not 1 <= frames <= self._capacity:
            raise ValueError("need 1 <= min_frames <= capacity")
        self._min_frames = frames
        self._delay.set_min(frames, release=release)

    @property
    def min_frames(self) -> int:
        return self._min_frames

    @property
    def playout_seq(self) -> int | None:
        """16-bit seq of the next slot to play (anything older is late); None before start."""
        nxt = self._window.next
        return None if nxt is None else nxt & SEQ_MASK

    @property
    def target_frames(self) -> int:
        return self._delay.target

    @property
    def depth_frames(self) -> float:
        """Buffered media in frames (20 ms), gaps included: what ``target_frames`` is about."""
        return self._window.depth_ticks(self._packet_ticks) / self._frame_ticks

    @property
    def packet_ticks(self) -> int:
        """The stream's packet duration in RTP ticks (the newest packet's)."""
        return self._packet_ticks

    @property
    def playing(self) -> bool:
        return self._playing

    @property
    def stats(self) -> JitterStats:
        """A snapshot of the counters and gauges."""
        return replace(
            self._stats,
            target_frames=self._delay.target,
            depth=round(self.depth_frames),
            jitter_ms=self._delay.jitter_s * 1000.0,
        )
