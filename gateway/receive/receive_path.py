"""Our own audio receive path: RTP in, 20 ms of PCM out on the playout clock (24 kHz, or the
config's ``sample_rate``: libopus decodes at it).

Raw RTP (``on_rtp`` from a receiver tap, or ``on_packet``) feeds a loss tracker (sequence gaps),
a :class:`NackGenerator` and an adaptive :class:`JitterBuffer`, each packet with its duration
as libopus reads it (10 to 60 ms, multi-frame packets too). ``tick(now)`` plays one period: it
pops the jitter buffer as often as the decoded audio runs short (FEC from the next packet's LBRR
when a packet is lost, else libopus PLC, for the duration the timestamps show), cuts exactly
20 ms from the decoded audio (:class:`SampleQueue`) and hands the frame to ``pcm``
(:class:`PcmSource`: a bounded ring to pull from, callbacks per frame), to the optional
recording (``record_s``) and period log (``log_periods``), and to ``wait_*`` callers.

``start()`` puts ``tick`` on the process-wide ticker (:class:`PlayoutClock`: a tick callback per
period, absolute schedule, no task of its own), from one period after the first packet, and
starts the NACK sender (:class:`NackSender`, the one task) when NACK is on and ``send_rtcp`` is
given: it asks for what the generator found missing, on each gap and each period while
packets are missing (retries). Only sequence gaps are asked for: a sender that pauses (DTX,
mute) causes no NACK, no loss and no concealment; the pause plays as a short PLC fade then
silence, and counts in ``pauses`` / ``paused_periods`` once packets resume later in timestamp.

The clock's phase follows the arrivals: each period starts ``tick_guard_s`` before a packet is
due, which leaves a lost packet's repair the most time within the buffered delay. When more
than the jitter buffer's target stays buffered for ``trim_after_periods``, one silent packet is
cut in a pause (``trim_pause_frames`` quiet frames in a row: a quiet frame inside a word is no
place for it), two or more all at once in a longer pause (``cut_pause_frames``: the burst floor
came down, one change of delay); the jitter buffer itself would drop any, speech too, and still
does after ``force_trim_after_periods`` without silence. When less than the target stays
buffered for ``stretch_after_periods`` (a start on a burst of packets, or a target that grew),
one period of silence is inserted in a pause. With NACK on, the jitter buffer keeps
``nack_reserve_frames`` more than its jitter-driven minimum, so a lost packet can still be asked
for and played.

RFC 2198 RED (``on_packet(..., red=True)``; ``on_rtp`` for packets of ``red_payload_type``):
the primary goes where a plain packet would, then the redundant copies fill the frames this
very packet showed missing, before a NACK is sent for them or FEC/PLC is tried
(:class:`RedRecovery`); without NACK the buffer keeps up to ``red_reserve_frames`` more so the
oldest copy comes in time. A stall that repairs ended (a loss burst longer than the buffer) is
kept as depth for ``repair_hold_s`` (:class:`RepairFloor`), so the next such burst is repaired
in time instead of stalling again. With NACK on, every sequence gap is also a burst for
:class:`BurstDepth`: the buffer holds what the stream's bursts need for their repairs to come in
time (the tail of their lengths plus the RTT, at most ``burst_max_frames``), peak-held; it
deepens to that in a pause (``pause_frames`` quiet frames in a row, the whole shortfall at once,
never while packets are overdue), and a stall under way resumes at the old target first. With
``burst_start_frames`` (opt-in) the floor is that deep from the start until
``burst_start_hold_s`` has shown the link's bursts (:class:`BurstDepth`'s start hold).

Everything is bounded (buffers, ring, the opt-in log and recording); ``close`` stops the clock,
the NACK task, the PCM source and every waiter. Settings: :class:`ReceivePathConfig`;
counters: :class:`ReceiveStats`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from gateway.media.opus_codec import RTP_CLOCK_RATE
from gateway.nack.generator import NackGenerator
from gateway.nack.sender import NackSender, SendRtcp
from gateway.receive.depth_policy import DepthPolicy
from gateway.receive.frame_decoder import FrameDecoder, FrameKind
from gateway.receive.jitter_buffer import InsertResult, JitterBuffer, PopKind
from gateway.receive.level import LevelKeeper
from gateway.receive.loss_tracker import LossTracker
from gateway.receive.opus_packet import packet_ticks
from gateway.receive.pcm_source import PcmFrame, PcmSource, ReceivePathClosed
from gateway.receive.period_waiters import PeriodWaiters
from gateway.receive.playout import PlayoutClock, TickScheduler
from gateway.receive.receive_config import PERIOD_S, PlayedPeriod, ReceivePathConfig
from gateway.receive.receive_stats import DelayTracker, ReceiveStats, TransitTracker
from gateway.receive.red_recovery import MalformedRed, RedCopy, RedRecovery, split_red
from gateway.receive.sample_queue import Decoded, Period, SampleQueue
from gateway.rtp.seqnum import SEQ_MASK, Unwrapper, seq_diff

__all__ = ["ReceivePath", "ReceivePathClosed", "ReceivePathConfig", "SendRtcp"]

_PHASE_TOLERANCE_S = 0.002
_NOT_SLOTS = (FrameKind.UNDERRUN, FrameKind.INSERTED)  # (``Decoded.is_slot``'s complement)


class ReceivePath:
    def __init__(
        self,
        config: ReceivePathConfig | None = None,
        send_rtcp: SendRtcp | None = None,
        sender_ssrc: Callable[[], int | None] | None = None,
        *,
        ticker: TickScheduler | None = None,
    ) -> None:
        """``ticker``: the playout clock's scheduler (default: the loop's shared ticker)."""
        self.config = cfg = config or ReceivePathConfig()
        self._now: Callable[[], float] = ticker.now if ticker is not None else time.monotonic
        self.jitter = JitterBuffer(
            min_frames=cfg.jitter_min_frames,
            max_frames=cfg.max_frames,
            catchup_pops=cfg.force_trim_after_periods,
        )
        self.nack = NackGenerator(
            window_frames=cfg.nack_window_frames,
            max_retries=cfg.nack_max_retries,
            min_interval_s=cfg.nack_min_interval_s,
            rtt_factor=cfg.nack_rtt_factor,
            max_nacks_per_s=cfg.nack_max_per_s,
            max_seqs_per_s=cfg.nack_max_seqs_per_s,
        )
        self.red = RedRecovery(self.jitter, self.nack)
        self.depth = DepthPolicy(cfg, self.jitter, self.nack, self.red)
        self._red_pt: int | None = None
        self.decoder = FrameDecoder(fec=cfg.fec, sample_rate=cfg.sample_rate)
        self._frame = cfg.frame_samples  # a period's samples
        # (read every period or packet: kept here, not computed from the config each time)
        self._need = cfg.decode_ahead_frames * self._frame
        self._record_periods = cfg.record_periods
        self._nack_on = cfg.nack
        self.losses = LossTracker()
        self.pcm = PcmSource(cfg.pcm_ring_frames, cfg.sample_rate)
        self._nacks: NackSender | None = None
        if cfg.nack and send_rtcp is not None:
            self._nacks = NackSender(self.nack, send_rtcp, lambda: self.jitter.playout_seq,
                                     sender_ssrc)
        self._clock = PlayoutClock(
            self.tick,
            period_s=PERIOD_S,
            cover_s=PERIOD_S * cfg.pcm_buffer_frames,
            rephase=self._rephase,
            ticker=ticker,
        )
        self._queue = SampleQueue()
        self._stats = ReceiveStats()
        self.level = LevelKeeper(cfg, self.jitter, self._stats)
        self._tss = Unwrapper(32)
        self._transit = TransitTracker()
        self._delay = DelayTracker()
        self._recording: list[np.ndarray] = []
        self._log: deque[PlayedPeriod] | None = (
            deque(maxlen=cfg.log_periods) if cfg.log_periods else None
        )
        self._periods = 0
        self._started_playing = False
        self._dry_periods = 0  # underrun periods since audio stopped: a stall or a pause?
        self._repairs_before_dry = 0  # repairs (in time or late) when they started
        self._first_arrival: float | None = None
        self._last_arrival: float | None = None
        self._media_time: float | None = None  # of the newest first transmission
        self._waiters = PeriodWaiters()
        self._started = False
        self._closed = False

    # -- input ----------------------------------------------------------------------------

    @property
    def red_payload_type(self) -> int | None:
        """The RTP payload type ``on_rtp`` takes as RFC 2198 RED (None: no RED)."""
        return self._red_pt

    @red_payload_type.setter
    def red_payload_type(self, payload_type: int | None) -> None:
        """RED was negotiated: the buffer keeps the RED reserve from the start (deepening it
        when the first copies come would cost a stretch in the middle of the stream)."""
        self._red_pt = payload_type
        if payload_type is not None and self.config.red:
            self.depth.red_negotiated()
            self._apply_floor(self._now())

    def on_rtp(self, packet: Any, arrival_time_ms: int = 0) -> None:
        """Receiver tap (``aiortc_compat.tap_rtp``): one RTP packet off the wire (aiortc's
        ``RtpPacket``, or the receive fast path's ``RtpFields``: int fields, a bytes payload,
        read as they are); RFC 2198 RED when its payload type is ``red_payload_type``."""
        red_pt = self._red_pt
        self.on_packet(
            packet.sequence_number,
            packet.timestamp,
            packet.payload,
            packet.ssrc,
            self._now(),
            red=red_pt is not None and packet.payload_type == red_pt,
        )

    def on_packet(
        self, seq: int, timestamp: int, payload: bytes, ssrc: int, now: float, *,
        red: bool = False,
    ) -> None:
        """One RTP packet; ``red``: its payload is RFC 2198 RED (primary + redundant copies)."""
        if self._closed:
            return
        st = self._stats
        st.received += 1
        copies: list[RedCopy] | None = None
        if red:
            try:
                payload, copies = split_red(payload, seq, timestamp)
            except MalformedRed:
                self.red.counts.malformed += 1
                return
            self.red.counts.packets += 1
        if self._nacks is not None:
            self._nacks.media_ssrc = ssrc
        self._last_arrival = now
        if self._first_arrival is None:
            self._first_arrival = now
            if self._started:
                self._start_clock()
        seq &= SEQ_MASK
        media_time = self._tss.unwrap(timestamp & 0xFFFFFFFF) / RTP_CLOCK_RATE
        arrival = self.losses.on_packet(seq)
        if arrival.gap:
            self.depth.on_gap(arrival.gap, now)
        repaired = self.nack.on_packet(seq, now) if self._nack_on else False
        result = self.jitter.insert(
            seq, timestamp, payload, now, retransmitted=repaired, duration=packet_ticks(payload)
        )
        if result is InsertResult.ACCEPTED:
            if repaired and len(payload) <= 1:
                st.nack_concealment += 1
            elif repaired:
                st.recovered_nack += 1
            elif arrival.fills_gap:
                st.reordered += 1
        if not repaired and result is not InsertResult.DUPLICATE:
            self._media_time = media_time
            self._transit.add(now - media_time)
        if copies and self.config.red:
            self._fill_from_red(copies, now)
        elif arrival.gap and self.depth.bursts is not None:
            self._apply_floor(now)
        if self._nacks is not None and self.nack.missing:
            self._nacks.wake()

    def _fill_from_red(self, copies: list[RedCopy], now: float) -> None:
        """Missing frames from the redundant copies, before anything asks for them (the gap
        was seen on this very packet); the buffer deepens so the oldest copy is in time."""
        self.red.fill(copies, now)
        self.depth.on_red_copies()
        self._apply_floor(now)

    def _apply_floor(self, now: float) -> None:
        self.depth.apply(now, self._started_playing)

    @property
    def burst_floor_frames(self) -> int:
        """The depth the recent loss bursts' NACK repairs need (the floor without bursts when
        there were none, or NACK is off)."""
        return self.depth.burst_floor

    # -- output ---------------------------------------------------------------------------

    def tick(self, now: float) -> np.ndarray:
        """One playout period: decode what it needs, play (and hand out) exactly 20 ms."""
        self._apply_floor(now)
        queue = self._queue
        self.level.measure(queue.samples)
        need = self._need
        while queue.samples < need:
            queue.push(self._decode_next(now, need - queue.samples))
        period = queue.take(self._frame)
        pcm = period.pcm
        pcm.flags.writeable = False
        self._account(period, now)
        if self._record_periods:
            if self._periods < self._record_periods:
                self._recording.append(pcm)
            else:
                self._stats.unrecorded_periods += 1
        pieces = period.pieces
        main = pieces[0] if len(pieces) == 1 else period.main  # (one slot: the common case)
        index = self._periods
        self._periods += 1
        played = None
        if self._log is not None or self._waiters.waiting:  # (a record only for them)
            played = PlayedPeriod(index, now, main.kind, main.seq, main.payload)
            if self._log is not None:
                self._log.append(played)
        self.pcm.push(PcmFrame(index, now, main.kind, main.seq, pcm))
        if played is not None:
            self._waiters.notify(played)
        if self._nacks is not None and self.nack.missing:
            self._nacks.wake()  # retries are due on the playout clock
        return pcm

    def _decode_next(self, now: float, want: int) -> Decoded:
        return self.level.decode_next(now, want, self._pop_decode,
                                      deepening=self.depth.deepening, overdue=self._overdue(now))

    def _overdue(self, now: float) -> bool:
        """Packets are overdue (a loss burst under way, or a pause): the buffer is short only
        until they come (or it is not a stream), no reason to add delay."""
        last = self._last_arrival
        return last is None or now - last > 1.5 * self.jitter.packet_ticks / RTP_CLOCK_RATE

    def _pop_decode(self, now: float, want: int) -> Decoded:
        result = self.jitter.pop(now)
        kind, pcm = self.decoder.decode(result, want)
        payload = result.payload if result.kind is PopKind.FRAME else None
        peak = self.decoder.peak if kind is FrameKind.FRAME else -1
        return Decoded(kind, result.seq, result.timestamp, payload, pcm, result.ts_gap, peak)

    def _account(self, period: Period, now: float) -> None:
        pieces = period.pieces
        if len(pieces) == 1:  # one slot, the common case: ``has_slot`` without a generator
            item = pieces[0]
            if item.kind not in _NOT_SLOTS:
                self._stats.played += 1
                if period.started:
                    self._account_slot(item, now)
                return
        elif period.has_slot:
            self._stats.played += 1
            for item in period.started:
                if item.is_slot:
                    self._account_slot(item, now)
            return
        if self._started_playing and any(p.kind is FrameKind.UNDERRUN for p in pieces):
            if not self._dry_periods:
                self._repairs_before_dry = self._repairs()
            self._dry_periods += 1

    def _repairs(self) -> int:
        """Repairs that came (NACK answers and RED copies)."""
        return self._stats.recovered_nack + self.red.counts.recovered

    def _account_slot(self, item: Decoded, now: float) -> None:
        st = self._stats
        self._started_playing = True
        if self._dry_periods:  # audio again: the sender paused, or the stream stalled
            if item.kind is FrameKind.FRAME and item.ts_gap > 0:
                st.paused_periods += self._dry_periods
            else:
                st.underrun_periods += self._dry_periods
                if self._repairs() > self._repairs_before_dry:
                    # a loss burst longer than the buffer, repaired after it ran dry: keep the
                    # stall as depth, so the next burst this long is repaired in time
                    self.depth.repair_floor.stalled_for_repair(self._dry_periods, now)
            self._dry_periods = 0
        if item.kind is FrameKind.FEC:
            st.recovered_fec += 1
        elif item.kind is FrameKind.PLC:
            st.concealed += 1
        elif item.kind is FrameKind.CONCEALMENT_PACKET:
            st.concealed += 1
            st.concealment_packets += 1
        if item.timestamp is not None:
            minimum = self._transit.minimum
            if minimum is not None:
                media_time = self._tss.peek(item.timestamp) / RTP_CLOCK_RATE
                self._delay.add(now - (media_time + minimum))

    # -- clock ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start playout (its first period one period after the first packet, less
        ``tick_guard_s``) and the NACK sender. Call it from the event loop; idempotent."""
        if self._started or self._closed:
            return
        self._started = True
        if self._nacks is not None:
            self._nacks.start()
        if self._first_arrival is not None:
            self._start_clock()

    def _start_clock(self) -> None:
        assert self._first_arrival is not None
        self._clock.start(self._first_arrival + PERIOD_S - self.config.tick_guard_s)

    def _rephase(self, next_at: float) -> float:
        """Keep each period starting ``tick_guard_s`` before packets are due at the fastest.

        Packets are due on their own grid (every 20 ms for 20 ms packets, 10 ms for 10 ms
        ones): media time plus the smallest recent transit. The first packet (which set the
        phase) may have been slow; a clock started late would find one packet too many
        buffered at every period and the jitter buffer would cut it.
        """
        if self._media_time is None or self._transit.minimum is None:
            return next_at
        due = self._media_time + self._transit.minimum
        grid = min(PERIOD_S, self.jitter.packet_ticks / RTP_CLOCK_RATE)
        offset = (next_at + self.config.tick_guard_s - due) % grid
        if offset > grid / 2:
            offset -= grid
        if abs(offset) <= _PHASE_TOLERANCE_S:
            return next_at
        self._stats.rephases += 1
        return next_at - offset

    @property
    def running(self) -> bool:
        """The playout clock is running (started, a packet came, not closed)."""
        return self._clock.running

    async def close(self) -> None:
        """Stop the clock, the NACK task, the PCM source and every waiter (idempotent)."""
        self._closed = True
        self._clock.stop()
        if self._nacks is not None:
            await self._nacks.close()
        self.pcm.close()
        self._waiters.close()

    # -- waiting --------------------------------------------------------------------------

    async def wait_for(self, predicate: Callable[[PlayedPeriod], bool]) -> None:
        """Until a playout period for which ``predicate(period)`` is true has been played."""
        await self._waiters.wait_for(predicate)

    async def wait_periods(self, count: int) -> None:
        """Until ``count`` more playout periods (20 ms each) have been played."""
        target = self._periods + count - 1
        await self.wait_for(lambda p: p.index >= target)

    async def wait_played(self, seq16: int) -> None:
        """Until the packet ``seq16`` (or a later one) has had its playout period."""
        await self.wait_for(lambda p: p.seq is not None and seq_diff(p.seq, seq16) >= 0)

    # -- results --------------------------------------------------------------------------

    @property
    def periods(self) -> int:
        return self._periods

    @property
    def played(self) -> deque[PlayedPeriod]:
        """The last ``log_periods`` playout periods (opt-in: ``ReceivePathConfig``)."""
        if self._log is None:
            raise RuntimeError("the period log is off: ReceivePathConfig(log_periods=...)")
        return self._log

    def played_pcm(self) -> np.ndarray:
        """What was played (mono int16 at ``config.sample_rate``), up to ``record_s``
        (opt-in)."""
        if not self.config.record_periods:
            raise RuntimeError("recording is off: ReceivePathConfig(record_s=...)")
        if not self._recording:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._recording)

    @property
    def stats(self) -> ReceiveStats:
        jb = self.jitter.stats
        nack = self.nack.stats
        clock = self._clock.stats
        on = self.config.nack
        return self._stats.snapshot(
            lost=self.losses.lost,
            late=jb.late,
            duplicate=jb.duplicate,
            dropped=jb.dropped,
            underruns=jb.underruns - jb.pauses,
            underrun_periods=self._stats.underrun_periods + self._dry_periods,
            stalled_periods=self._stats.underrun_periods,
            pauses=jb.pauses,
            jitter_ms=jb.jitter_ms,
            target_frames=jb.target_frames,
            depth_frames=jb.depth,
            pcm_frames=self._queue.samples // self._frame,
            recovered_red=self.red.counts.recovered,
            red_packets=self.red.counts.packets,
            red_late=self.red.counts.late,
            red_malformed=self.red.counts.malformed,
            nacks_sent=nack.nacks_sent if on else 0,
            seqs_nacked=nack.seqs_requested if on else 0,
            nacks_cancelled=nack.cancelled if on else 0,
            nacks_capped=nack.capped if on else 0,
            nack_send_failures=self._nacks.send_failures if self._nacks is not None else 0,
            rtt_ms=nack.rtt_ms,
            skipped_periods=clock.skipped_periods,
            clock_stalls=clock.clock_stalls,
            period_errors=clock.errors,
            pcm_dropped=self.pcm.dropped,
            delay=self._delay,
        )
