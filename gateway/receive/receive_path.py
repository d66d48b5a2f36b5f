"""Our own audio receive path for the headless client (aiortc's is bypassed).

Raw RTP from the receiver tap (``on_rtp``) feeds a :class:`NackGenerator` and an adaptive
:class:`JitterBuffer`. A playout clock (a task of ours, 20 ms absolute schedule on
``time.monotonic``) runs one period at a time (``tick``): it pops the jitter buffer, decodes
(FEC from the next packet's LBRR when a frame is lost, else libopus PLC) into a decoded PCM
buffer of at most ``pcm_buffer_frames`` frames and plays one frame from it, which is recorded:
that recording is what a listener heard. A second task sends NACKs as standard RTCP generic
NACKs (``gateway.rtp.rtcp_nack``, wrap-safe) through ``send_rtcp``: the generator's (gaps seen on
arrival, with retries) and, each period, packets overdue by ``overdue_margin_s`` (or 3x the
jitter) before any later one arrived (``LossTracker``), so a burst of losses is asked for
packet by packet rather than after it ends.

The clock's phase follows the arrivals: each period starts ``tick_guard_s`` before a packet is
due, which leaves a lost packet's repair the most time within the buffered delay. When more
than the jitter buffer's target stays buffered for ``trim_after_periods``, one silent frame is
cut (the jitter buffer itself would drop any frame, speech too; it still does after
``force_trim_after_periods`` without silence); when less than the target stays buffered for
``stretch_after_periods`` (a start on a burst of packets, or a target that grew), one period of
silence is inserted in a pause. With NACK on, the jitter buffer keeps ``nack_reserve_frames``
more than its jitter-driven minimum, so a lost packet can still be asked for and played.

Everything is bounded (buffers, logs, the recording) and ``close`` cancels both tasks.
Settings: :class:`ReceivePathConfig`; counters: :class:`ReceiveStats`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from gateway.media.opus_codec import FRAME_SAMPLES, RTP_CLOCK_RATE
from gateway.receive.frame_decoder import FrameDecoder, FrameKind
from gateway.receive.jitter_buffer import InsertResult, JitterBuffer, PopKind
from gateway.receive.loss_tracker import LossTracker
from gateway.receive.receive_config import PERIOD_S, PlayedPeriod, ReceivePathConfig
from gateway.receive.receive_stats import DelayTracker, ReceiveStats, TransitTracker
from gateway.rtp.nack_generator import NackGenerator
from gateway.rtp.rtcp_nack import build_nack_packet
from gateway.rtp.seqnum import SEQ_MASK, Unwrapper, seq_diff

log = logging.getLogger(__name__)

_PHASE_TOLERANCE_S = 0.002
_QUIET_PEAK = 64  # int16 peak of a frame that may be cut to trim latency (about -54 dBFS)
_CATCH_UP_YIELDS = 4  # loop iterations a datagram needs from the socket to our tap
SendRtcp = Callable[[bytes], Awaitable[bool]]


def _is_quiet(pcm: np.ndarray) -> bool:
    return not pcm.size or int(np.max(np.abs(pcm.astype(np.int32)))) <= _QUIET_PEAK


@dataclass(slots=True)
class _Decoded:
    kind: FrameKind
    seq: int | None
    timestamp: int | None
    payload: bytes | None
    pcm: np.ndarray


class ReceivePath:
    def __init__(
        self,
        config: ReceivePathConfig | None = None,
        send_rtcp: SendRtcp | None = None,
        sender_ssrc: Callable[[], int | None] | None = None,
    ) -> None:
        self.config = cfg = config or ReceivePathConfig()
        self._send_rtcp = send_rtcp
        self._sender_ssrc = sender_ssrc
        self._fallback_ssrc = random.getrandbits(32)
        self.jitter = JitterBuffer(
            min_frames=cfg.jitter_min_frames,
            max_frames=cfg.max_frames,
            catchup_pops=cfg.force_trim_after_periods,
        )
        self._excess_periods = 0
        self._short_periods = 0
        self._last_quiet = False
        self._silence = np.zeros(FRAME_SAMPLES, dtype=np.int16)
        self.nack = NackGenerator(
            window_frames=cfg.nack_window_frames,
            max_retries=cfg.nack_max_retries,
            min_interval_s=cfg.nack_min_interval_s,
        )
        self.decoder = FrameDecoder(fec=cfg.fec)
        self._stats = ReceiveStats()
        self.losses = LossTracker(window_frames=cfg.nack_window_frames)
        self._overdue: list[int] = []  # asked for as overdue, not sent yet
        self._tss = Unwrapper(32)
        self._transit = TransitTracker()
        self._delay = DelayTracker()
        self._pcm: deque[_Decoded] = deque()
        self._recording: list[np.ndarray] = []
        self._max_recorded = int(cfg.record_s / PERIOD_S)
        self.played: deque[PlayedPeriod] = deque(maxlen=cfg.log_periods)
        self._periods = 0
        self._started_playing = False
        self._media_ssrc: int | None = None
        self._first_arrival: float | None = None
        self._media_time: float | None = None  # of the newest first transmission
        self._first_packet = asyncio.Event()
        self._nack_wake = asyncio.Event()
        self._waiters: list[tuple[Callable[[PlayedPeriod], bool], asyncio.Future[None]]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False

    # -- input ----------------------------------------------------------------------------

    def on_rtp(self, packet: object, arrival_time_ms: int = 0) -> None:
        """Receiver tap (``aiortc_compat.tap_rtp``): one RTP packet off the wire."""
        self.on_packet(
            int(packet.sequence_number),  # type: ignore[attr-defined]
            int(packet.timestamp),  # type: ignore[attr-defined]
            bytes(packet.payload),  # type: ignore[attr-defined]
            int(packet.ssrc),  # type: ignore[attr-defined]
            time.monotonic(),
        )

    def on_packet(self, seq: int, timestamp: int, payload: bytes, ssrc: int, now: float) -> None:
        if self._closed:
            return
        st = self._stats
        st.received += 1
        self._media_ssrc = ssrc
        if self._first_arrival is None:
            self._first_arrival = now
            self._first_packet.set()
        seq &= SEQ_MASK
        media_time = self._tss.unwrap(timestamp & 0xFFFFFFFF) / RTP_CLOCK_RATE
        arrival = self.losses.on_packet(seq, media_time)
        generator_repair = self.nack.on_packet(seq, now) if self.config.nack else False
        repaired = generator_repair or arrival.asked_early
        # (a packet asked for early may just have been late: its delay still counts as jitter)
        result = self.jitter.insert(seq, timestamp, payload, now, retransmitted=generator_repair)
        if result is InsertResult.ACCEPTED:
            if repaired and len(payload) <= 1:
                st.nack_concealment += 1
            elif repaired:
                st.recovered_nack += 1
            elif arrival.fills_gap:
                st.reordered += 1
        if not generator_repair and result is not InsertResult.DUPLICATE:
            # Packets asked for early count too: leaving the late ones out would drag the
            # typical transit down and make ever more packets look overdue.
            self._media_time = media_time
            self._transit.add(now - media_time)
        if self.config.nack and self.nack.missing:
            self._nack_wake.set()

    # -- output ---------------------------------------------------------------------------

    def tick(self, now: float) -> np.ndarray:
        """One playout period: keep the PCM buffer filled, play (and record) one frame."""
        while len(self._pcm) < self.config.decode_ahead_frames:
            self._pcm.append(self._decode_next(now))
        item = self._pcm.popleft()
        self._account(item, now)
        if len(self._recording) < self._max_recorded:
            self._recording.append(item.pcm)
        else:
            self._stats.unrecorded_periods += 1
        period = PlayedPeriod(self._periods, now, item.kind, item.seq, item.payload)
        self._periods += 1
        self.played.append(period)
        self._notify(period)
        if self.config.nack:
            self._ask_overdue(now)
            if self.nack.missing or self._overdue:
                self._nack_wake.set()  # retries are due on the playout clock
        return item.pcm

    def _ask_overdue(self, now: float) -> None:
        margin = max(self.config.overdue_margin_s, 3 * self.jitter.stats.jitter_ms / 1000)
        overdue = self.losses.overdue(now, self._transit.minimum, margin)
        if overdue:
            self._overdue.extend(overdue)
            del self._overdue[: -self.config.nack_window_frames]

    def _decode_next(self, now: float) -> _Decoded:
        jb = self.jitter
        depth, target = jb.stats.depth, jb.target_frames
        self._excess_periods = self._excess_periods + 1 if jb.playing and depth > target else 0
        self._short_periods = self._short_periods + 1 if jb.playing and depth < target else 0
        if self._short_periods >= self.config.stretch_after_periods and self._last_quiet:
            # Less buffered than the target for a while (a start on a burst, or the target
            # grew): play one period of silence in this pause and let the buffer fill up.
            self._short_periods = 0
            self._stats.stretched += 1
            return _Decoded(FrameKind.INSERTED, None, None, None, np.zeros_like(self._silence))
        item = self._pop_decode(now)
        self._last_quiet = item.kind is FrameKind.FRAME and _is_quiet(item.pcm)
        if (
            self._excess_periods >= self.config.trim_after_periods
            and item.kind is FrameKind.FRAME
            and _is_quiet(item.pcm)
        ):
            # One frame more buffered than the target for a while: cut it here, in silence,
            # rather than let the jitter buffer drop one wherever it happens to be (speech).
            self._excess_periods = 0
            self._stats.trimmed += 1
            item = self._pop_decode(now)
            self._last_quiet = item.kind is FrameKind.FRAME and _is_quiet(item.pcm)
        return item

    def _pop_decode(self, now: float) -> _Decoded:
        result = self.jitter.pop(now)
        kind, pcm = self.decoder.decode(result)
        payload = result.payload if result.kind is PopKind.FRAME else None
        return _Decoded(kind, result.seq, result.timestamp, payload, pcm)

    def _account(self, item: _Decoded, now: float) -> None:
        st = self._stats
        if item.kind is FrameKind.INSERTED:
            return
        if item.kind is FrameKind.UNDERRUN:
            if self._started_playing:
                st.underrun_periods += 1
            return
        self._started_playing = True
        st.played += 1
        if item.kind is FrameKind.FEC:
            st.recovered_fec += 1
        elif item.kind is FrameKind.PLC:
            st.concealed += 1
        elif item.kind is FrameKind.CONCEALMENT_PACKET:
            st.concealed += 1
            st.concealment_packets += 1
        if item.timestamp is not None and self._transit.minimum is not None:
            media_time = self._tss.peek(item.timestamp) / RTP_CLOCK_RATE
            self._delay.add(now - (media_time + self._transit.minimum))

    # -- tasks ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the playout clock (it waits for the first packet) and the NACK sender."""
        if self._tasks or self._closed:
            return
        self._tasks.append(asyncio.create_task(self._run_clock(), name="playout-clock"))
        if self.config.nack and self._send_rtcp is not None:
            self._tasks.append(asyncio.create_task(self._run_nacks(), name="nack-sender"))

    async def _run_clock(self) -> None:
        await self._first_packet.wait()
        assert self._first_arrival is not None
        next_at = self._first_arrival + PERIOD_S - self.config.tick_guard_s
        cover = PERIOD_S * self.config.pcm_buffer_frames
        while True:
            next_at = self._rephase(next_at)
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.monotonic()
            if now - next_at > PERIOD_S / 2:
                # Woken late: the event loop was busy. Let datagrams that queued up meanwhile
                # reach the jitter buffer before playing the periods that went by.
                for _ in range(_CATCH_UP_YIELDS):
                    await asyncio.sleep(0)
                now = time.monotonic()
            if now - next_at > cover:  # the loop stalled past what the PCM buffer covers
                missed = int((now - next_at) / PERIOD_S)
                self._stats.clock_stalls += 1
                self._stats.skipped_periods += missed
                next_at += missed * PERIOD_S
            self.tick(now)
            next_at += PERIOD_S

    def _rephase(self, next_at: float) -> float:
        """Keep each period starting ``tick_guard_s`` before packets are due at the fastest.

        Packets are due on a 20 ms grid: media time plus the smallest recent transit. The
        first packet (which set the phase) may have been slow; a clock started late would
        find one frame too many buffered at every period and the jitter buffer would cut it.
        """
        if self._media_time is None or self._transit.minimum is None:
            return next_at
        due = self._media_time + self._transit.minimum
        offset = (next_at + self.config.tick_guard_s - due) % PERIOD_S
        if offset > PERIOD_S / 2:
            offset -= PERIOD_S
        if abs(offset) <= _PHASE_TOLERANCE_S:
            return next_at
        self._stats.rephases += 1
        return next_at - offset

    async def _run_nacks(self) -> None:
        assert self._send_rtcp is not None
        while True:
            await self._nack_wake.wait()
            self._nack_wake.clear()
            seqs = self.nack.poll(time.monotonic(), self.jitter.playout_seq) + self._overdue
            self._overdue = []
            if not seqs or self._media_ssrc is None:
                continue
            sender = (self._sender_ssrc() if self._sender_ssrc else None) or self._fallback_ssrc
            packet = build_nack_packet(sender, self._media_ssrc, seqs)
            try:
                sent = await self._send_rtcp(packet)
            except Exception:  # a failing transport must not end the receive path
                log.debug("NACK send failed", exc_info=True)
                sent = False
            if not sent:
                self._stats.nack_send_failures += 1

    async def close(self) -> None:
        self._closed = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    # -- waiting --------------------------------------------------------------------------

    def _notify(self, period: PlayedPeriod) -> None:
        if not self._waiters:
            return
        keep = []
        for predicate, fut in self._waiters:
            if fut.done():
                continue
            if predicate(period):
                fut.set_result(None)
            else:
                keep.append((predicate, fut))
        self._waiters = keep

    async def wait_for(self, predicate: Callable[[PlayedPeriod], bool]) -> None:
        """Until a playout period for which ``predicate(period)`` is true has been played."""
        if self._closed:
            raise RuntimeError("receive path closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, fut))
        await fut

    async def wait_periods(self, count: int) -> None:
        """Until ``count`` more playout periods (20 ms each) have been played."""
        target = self._periods + count - 1
        await self.wait_for(lambda p: p.index >= target)

    async def wait_played(self, seq16: int) -> None:
        """Until the frame ``seq16`` (or a later one) has had its playout period."""
        await self.wait_for(lambda p: p.seq is not None and seq_diff(p.seq, seq16) >= 0)

    # -- results --------------------------------------------------------------------------

    @property
    def periods(self) -> int:
        return self._periods

    def played_pcm(self) -> np.ndarray:
        """Everything played so far (24 kHz mono int16), one 480-sample frame per period."""
        if not self._recording:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._recording)

    @property
    def stats(self) -> ReceiveStats:
        jb = self.jitter.stats
        nack = self.nack.stats
        return self._stats.snapshot(
            lost=self.losses.lost,
            nack_early=self.losses.asked_early,
            late=jb.late,
            duplicate=jb.duplicate,
            dropped=jb.dropped,
            underruns=jb.underruns,
            jitter_ms=jb.jitter_ms,
            target_frames=jb.target_frames,
            depth_frames=jb.depth,
            pcm_frames=len(self._pcm),
            nacks_sent=nack.nacks_sent if self.config.nack else 0,
            seqs_nacked=nack.seqs_requested if self.config.nack else 0,
            rtt_ms=nack.rtt_ms,
            delay=self._delay,
        )

