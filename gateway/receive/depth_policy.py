"""The jitter buffer's target depth: the deepest of the floors the stream has shown it needs.

- the RED floor: deep enough for the oldest redundant copy to come in time (RFC 2198);
- the repair floor (:class:`RepairFloor`): a stall that repairs ended is kept as depth for a
  while, so the next burst that long is repaired in time instead of stalling again;
- the burst floor (:class:`BurstDepth`, with NACK on): what the stream's loss bursts need for
  their NACK repairs to come in time (the tail of their lengths plus the RTT), peak-held.

``apply`` sets the jitter buffer's target to the deepest, except while a stall is under way
(it resumes at the old target first, and deepens in a pause later: as good, shorter stalls),
and widens the NACK window to what the buffer can still play.
"""

from __future__ import annotations

from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.nack.generator import NackGenerator
from gateway.receive.burst_depth import BurstDepth
from gateway.receive.jitter_buffer import JitterBuffer
from gateway.receive.receive_config import PERIOD_S, ReceivePathConfig
from gateway.receive.red_recovery import RedRecovery, needed_min_frames
from gateway.receive.repair_floor import RepairFloor


class DepthPolicy:
    def __init__(
        self, cfg: ReceivePathConfig, jitter: JitterBuffer, nack: NackGenerator,
        red: RedRecovery,
    ) -> None:
        self._cfg = cfg
        self._jitter = jitter
        self._nack = nack
        self._red = red
        self.red_floor = cfg.jitter_min_frames
        self.repair_floor = RepairFloor(cfg.jitter_min_frames, cfg.max_frames, cfg.repair_hold_s)
        self.bursts: BurstDepth | None = None
        if cfg.nack and cfg.burst_depth:
            self.bursts = BurstDepth(
                base=cfg.jitter_min_frames, top=cfg.burst_top_frames,
                late_every_s=cfg.burst_late_every_s, memory_s=cfg.burst_memory_s,
                round_trips=cfg.burst_round_trips, frame_s=PERIOD_S,
                start=cfg.burst_start_frames, start_hold_s=cfg.burst_start_hold_s,
            )
        self.burst_floor = cfg.jitter_min_frames

    @property
    def deepening(self) -> bool:
        """Loss bursts have raised the target above the configured minimum."""
        return self.burst_floor > self._cfg.jitter_min_frames

    def red_negotiated(self) -> None:
        """RED from the start: keep its reserve at once (deepening when the first copies come
        would cost a stretch in the middle of the stream)."""
        cfg = self._cfg
        if cfg.red:
            reserved = cfg.red_min_frames(cfg.min_frames + cfg.red_reserve_frames)
            self.red_floor = max(self.red_floor, reserved)

    def on_gap(self, gap_packets: int, now: float) -> None:
        """A sequence gap of ``gap_packets`` packets: a burst for the burst floor."""
        if self.bursts is not None:
            frames = gap_packets * self._jitter.packet_ticks / RTP_TICKS_PER_FRAME
            self.bursts.on_gap(frames, now)

    def on_red_copies(self) -> None:
        """Copies were used: deep enough for the oldest one to come in time."""
        self.red_floor = self._cfg.red_min_frames(needed_min_frames(self._red.oldest_offset))

    def apply(self, now: float, started_playing: bool) -> None:
        came_down = False
        cfg, jitter = self._cfg, self._jitter
        if self.bursts is not None:
            nack = self._nack
            rtt = nack.rtt_s if nack.rtt_measured else 0.0  # (a guess overshoots)
            retry = max(cfg.nack_rtt_factor * rtt, cfg.nack_min_interval_s)
            red_frames = self._red.oldest_offset / RTP_TICKS_PER_FRAME if cfg.red else 0.0
            floor = self.bursts.frames(now, rtt, retry, red_frames)
            came_down = floor < self.burst_floor
            self.burst_floor = floor
        floor = max(self.red_floor, self.repair_floor.frames(now), self.burst_floor)
        if floor > jitter.min_frames and started_playing and not jitter.playing:
            # stalled: resume as soon as the old target allows, deepen in a pause later
            # (measured: as good as stalling on to the new depth, and the stall is shorter)
            return
        if floor != jitter.min_frames:
            # the burst floor came down: so does the target, the excess is cut in a pause
            jitter.set_min_frames(floor, release=came_down and floor < jitter.min_frames)
            # ask for what the buffer can still play, however long the burst before it
            self._nack.window_frames = max(cfg.nack_window_frames, floor + 2)
