"""Settings of the receive path, and the record of each playout period."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.media.opus_codec import DECODE_RATES, FRAME_MS, SAMPLE_RATE
from gateway.receive.frame_decoder import FrameKind

PERIOD_S = FRAME_MS / 1000


@dataclass(frozen=True)
class ReceivePathConfig:
    """Feature switches (``nack``, ``fec``), tuning, and what is kept of what was played.

    Nothing of the played audio is kept unless asked for: ``record_s`` keeps that many seconds
    of PCM (at ``sample_rate``) for ``ReceivePath.played_pcm()`` (20 ms of 24 kHz mono is 960
    bytes: 60 s is about 2.9 MB), ``log_periods`` keeps the last that many
    :class:`PlayedPeriod` records in ``ReceivePath.played``. Consumers of the audio as it plays
    read ``ReceivePath.pcm``, whose ring holds ``pcm_ring_frames`` unread frames (0: callbacks
    only).
    """

    nack: bool = True
    fec: bool = True
    red: bool = True  # use RFC 2198 redundant copies (when the sender sends RED)
    min_frames: int = 2  # jitter buffer target range (frames of 20 ms)
    max_frames: int = 5
    nack_reserve_frames: int = 1  # added to min_frames when NACK is on (one round trip)
    red_reserve_frames: int = 1  # at most this much added so RED's oldest copy is in time
    repair_hold_s: float = 10.0  # a stall a late NACK repair ended deepens the buffer this long
    # NACK on: the buffer holds the bursts' repair time (BurstDepth), at most burst_max_frames
    burst_depth: bool = True
    burst_max_frames: int = 12  # the latency bound of that (12 frames: 240 ms)
    burst_late_every_s: float = 60.0  # a burst longer than the floor about this seldom
    burst_round_trips: int = 1  # repair round trips held for (2: for a lost answer's retry)
    burst_memory_s: float = 30.0  # bursts older than this no longer hold the buffer deep
    # ... and, opt-in, this much from the start until the link has shown its bursts (0: the
    # floor), for burst_start_hold_s; then what the bursts seen need, the excess cut in a pause
    burst_start_frames: int = 0
    burst_start_hold_s: float = 10.0
    deepen_after_periods: int = 2  # short of a target bursts raised: add silence this soon
    pause_frames: int = 3  # ... in a pause: after this many quiet frames (not in a word)
    trim_pause_frames: int = 3  # a frame too many is cut after this many quiet frames in a row
    cut_pause_frames: int = 6  # two or more: all of it, after this many (a pause, not a word)
    pcm_buffer_frames: int = 4  # decoded PCM waiting for the playout clock, at most
    decode_ahead_frames: int = 1  # decoded before they are due (1: decode just in time)
    tick_guard_s: float = 0.005
    trim_after_periods: int = 25  # more buffered than the target this long: cut a silent frame
    stretch_after_periods: int = 25  # less buffered than the target this long: add silence
    force_trim_after_periods: int = 250  # ... and cut any frame if no silence comes (5 s)
    nack_window_frames: int = 10
    nack_max_retries: int = 3
    nack_min_interval_s: float = 0.02  # retries 1.5 RTT apart, never closer than this
    nack_rtt_factor: float = 1.5
    nack_max_per_s: float = 50.0  # NACK packets per second, at most
    nack_max_seqs_per_s: float = 200.0  # sequence numbers asked for per second, at most
    record_s: float = 0.0  # seconds of played PCM kept for played_pcm() (0: none)
    log_periods: int = 0  # PlayedPeriod records kept in .played (0: none)
    pcm_ring_frames: int = 4  # unread frames ReceivePath.pcm holds before dropping the oldest
    # the rate libopus decodes at, so the PCM's (24 kHz; a consumer that wants 16 kHz, the
    # duplex's listener, has it decoded so rather than resampled: docs/density.md)
    sample_rate: int = SAMPLE_RATE

    def __post_init__(self) -> None:
        if not 1 <= self.min_frames <= self.max_frames:
            raise ValueError("need 1 <= min_frames <= max_frames")
        if not 1 <= self.decode_ahead_frames <= self.pcm_buffer_frames:
            raise ValueError("need 1 <= decode_ahead_frames <= pcm_buffer_frames")
        if not 0 <= self.tick_guard_s < PERIOD_S:
            raise ValueError("tick_guard_s must be within [0, 20 ms)")
        if self.record_s < 0 or self.log_periods < 0 or self.pcm_ring_frames < 0:
            raise ValueError("record_s, log_periods and pcm_ring_frames must be >= 0")
        if self.nack_reserve_frames < 0 or self.red_reserve_frames < 0:
            raise ValueError("the reserves must be >= 0")
        if not 1 <= self.burst_max_frames <= 50 or min(self.deepen_after_periods,
                                                       self.pause_frames) < 1:
            raise ValueError("need 1 <= burst_max_frames <= 50, deepen_after_periods and "
                             "pause_frames >= 1")
        if self.burst_late_every_s <= 0 or self.burst_memory_s <= 0 or self.burst_round_trips < 1:
            raise ValueError("need burst_late_every_s > 0, burst_memory_s > 0 and "
                             "burst_round_trips >= 1")
        if self.burst_start_frames < 0 or self.burst_start_hold_s < 0:
            raise ValueError("need burst_start_frames >= 0 and burst_start_hold_s >= 0")
        if min(self.trim_pause_frames, self.cut_pause_frames) < 1:
            raise ValueError("need trim_pause_frames and cut_pause_frames >= 1")
        if self.sample_rate not in DECODE_RATES:
            raise ValueError(f"sample_rate must be one of {DECODE_RATES}")

    @property
    def frame_samples(self) -> int:
        """Samples in a period (20 ms) at ``sample_rate``: 480 at 24 kHz, 320 at 16 kHz."""
        return self.sample_rate * FRAME_MS // 1000

    @property
    def jitter_min_frames(self) -> int:
        extra = self.nack_reserve_frames if self.nack else 0
        return min(self.max_frames, self.min_frames + extra)

    def red_min_frames(self, needed: int) -> int:
        """The jitter buffer's floor once RED copies need ``needed`` frames to be in time:
        within the RED reserve, never below the floor without RED (the NACK reserve covers
        both)."""
        with_red = min(needed, self.min_frames + self.red_reserve_frames)
        return min(self.max_frames, max(self.jitter_min_frames, with_red))

    @property
    def burst_top_frames(self) -> int:
        """The most the burst floor may hold (never below the floor without it)."""
        return max(self.jitter_min_frames, self.burst_max_frames)

    @property
    def record_periods(self) -> int:
        """How many playout periods the recording holds (0: no recording)."""
        return round(self.record_s / PERIOD_S)


@dataclass(frozen=True, slots=True)
class PlayedPeriod:
    """One playout period (20 ms). With packets shorter than a period, ``kind``, ``seq`` and
    ``payload`` are those of the newest packet whose audio is in it."""

    index: int  # playout period number, from 0
    at: float  # time.monotonic() when it was played
    kind: FrameKind
    seq: int | None  # 16-bit seq of the packet played (None: underrun or inserted silence)
    payload: bytes | None  # the Opus payload decoded (FRAME / CONCEALMENT_PACKET)
