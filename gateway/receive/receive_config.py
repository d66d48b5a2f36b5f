"""Settings of the client's receive path, and the record of each playout period."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.media.opus_codec import FRAME_MS
from gateway.receive.frame_decoder import FrameKind

PERIOD_S = FRAME_MS / 1000


@dataclass(frozen=True)
class ReceivePathConfig:
    """Feature switches (``nack``, ``fec``) and tuning; the defaults are what the CLI uses."""

    nack: bool = True
    fec: bool = True
    min_frames: int = 2  # jitter buffer target range (frames of 20 ms)
    max_frames: int = 5
    nack_reserve_frames: int = 1  # added to min_frames when NACK is on (one round trip)
    pcm_buffer_frames: int = 4  # decoded PCM waiting for the playout clock, at most
    decode_ahead_frames: int = 1  # decoded before they are due (1: decode just in time)
    tick_guard_s: float = 0.005
    trim_after_periods: int = 25  # more buffered than the target this long: cut a silent frame
    stretch_after_periods: int = 25  # less buffered than the target this long: add silence
    force_trim_after_periods: int = 250  # ... and cut any frame if no silence comes (5 s)
    nack_window_frames: int = 10
    nack_max_retries: int = 3
    nack_min_interval_s: float = 0.02
    overdue_margin_s: float = 0.010  # ask for a packet this late (or 3x the jitter) at once
    record_s: float = 600.0  # the recording of what was played stops growing after this
    log_periods: int = 15_000  # per-period log kept (5 min)

    def __post_init__(self) -> None:
        if not 1 <= self.min_frames <= self.max_frames:
            raise ValueError("need 1 <= min_frames <= max_frames")
        if not 1 <= self.decode_ahead_frames <= self.pcm_buffer_frames:
            raise ValueError("need 1 <= decode_ahead_frames <= pcm_buffer_frames")
        if not 0 <= self.tick_guard_s < PERIOD_S:
            raise ValueError("tick_guard_s must be within [0, 20 ms)")

    @property
    def jitter_min_frames(self) -> int:
        extra = self.nack_reserve_frames if self.nack else 0
        return min(self.max_frames, self.min_frames + extra)


@dataclass(frozen=True, slots=True)
class PlayedPeriod:
    index: int  # playout period number, from 0
    at: float  # time.monotonic() when it was played
    kind: FrameKind
    seq: int | None  # 16-bit seq of the frame played (None: underrun)
    payload: bytes | None  # the Opus payload decoded (FRAME / CONCEALMENT_PACKET)
