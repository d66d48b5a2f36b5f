"""Keeping what is buffered at the jitter buffer's target, in pauses.

Once per period ``measure`` says how long more (or less) than the target has stayed buffered.
``decode_next`` then, in a pause only (quiet frames in a row: a quiet frame inside a word is
no place for it):

- more than the target by a packet for ``trim_after_periods``: cuts one silent packet
  (``trim_pause_frames`` quiet frames in a row), or two or more all at once in a longer pause
  (``cut_pause_frames``: the burst floor came down, one change of delay);
- less than the target for ``stretch_after_periods`` (a start on a burst of packets, or a
  target that grew): inserts one period of silence; deepening for loss bursts, the whole
  shortfall at once (each change of delay costs PESQ, whatever its size).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.jitter_buffer import JitterBuffer
from gateway.receive.receive_config import ReceivePathConfig
from gateway.receive.receive_stats import ReceiveStats
from gateway.receive.sample_queue import Decoded

_QUIET_PEAK = 64  # int16 peak of a frame that may be cut to trim latency (about -54 dBFS)

PopDecode = Callable[[float, int], Decoded]


def is_quiet(pcm: np.ndarray) -> bool:
    """Every sample within ``_QUIET_PEAK`` of zero (int16; a frame's peak, as |sample|).

    Two reductions on the int16 array, not an int32 copy, its absolute values and a third:
    a test per period of every talker (``pcm.min() >= -peak`` is ``|sample| <= peak`` for the
    negative ones, -32768 included)."""
    return not pcm.size or (pcm.max() <= _QUIET_PEAK and pcm.min() >= -_QUIET_PEAK)


class LevelKeeper:
    def __init__(self, cfg: ReceivePathConfig, jitter: JitterBuffer, stats: ReceiveStats) -> None:
        self._cfg = cfg
        self._frame = cfg.frame_samples  # a period's samples at the path's rate
        self._jitter = jitter
        self._stats = stats
        self._excess_periods = 0
        self._excess_frames = 0.0
        self._short_periods = 0
        self._last_quiet = False
        self.quiet_run = 0  # quiet frames in a row just played (a pause, not a closure)

    def measure(self, queued_samples: int) -> None:
        """Once per period: how long more (or less) than the target has stayed buffered."""
        jb = self._jitter
        level = jb.depth_frames + queued_samples / self._frame
        self._excess_frames = excess = level - jb.target_frames
        over = jb.playing and excess >= jb.packet_ticks / RTP_TICKS_PER_FRAME  # a packet more
        under = jb.playing and excess <= -1  # a frame less
        self._excess_periods = self._excess_periods + 1 if over else 0
        self._short_periods = self._short_periods + 1 if under else 0

    def decode_next(
        self, now: float, want: int, pop: PopDecode, *, deepening: bool, overdue: bool
    ) -> Decoded:
        """The next decoded piece: ``pop(now, want)``'s, or silence inserted, or after a cut."""
        cfg = self._cfg
        wait = cfg.deepen_after_periods if deepening else cfg.stretch_after_periods
        in_pause = self.quiet_run >= (cfg.pause_frames if deepening else 1)
        if self._short_periods >= wait and in_pause and not overdue:
            frames = max(1, math.floor(-self._excess_frames)) if deepening else 1
            self._short_periods = 0
            self._stats.stretched += frames
            silence = np.zeros(frames * self._frame, dtype=np.int16)
            return Decoded(FrameKind.INSERTED, None, None, None, silence)
        item = self._note(pop(now, want))
        excess = self._excess_frames * self._frame  # samples
        # two packets or more too many (the burst floor came down): all of it in one pause
        whole = excess >= 2 * self._jitter.packet_ticks * self._frame / RTP_TICKS_PER_FRAME
        quiet = self.quiet_run >= (cfg.cut_pause_frames if whole else cfg.trim_pause_frames)
        if self._excess_periods >= cfg.trim_after_periods and quiet and item.pcm.size <= excess:
            # cut here, in silence, rather than let the jitter buffer drop a packet wherever
            # it is (speech); the whole excess in a pause, while it stays quiet
            self._excess_periods = 0
            while True:
                excess -= item.pcm.size
                self._stats.trimmed += 1
                item = self._note(pop(now, want))
                if not (whole and self._last_quiet and item.pcm.size <= excess):
                    break
        return item

    def _note(self, item: Decoded) -> Decoded:
        peak = item.peak  # (measured as it was decoded, in C: no numpy call here)
        self._last_quiet = item.kind is FrameKind.FRAME and (
            peak <= _QUIET_PEAK if peak >= 0 else is_quiet(item.pcm))
        self.quiet_run = self.quiet_run + 1 if self._last_quiet else 0
        return item
