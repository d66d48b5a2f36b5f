"""How deep the jitter buffer should be: the recent delay variation, fast up, slow down.

Each packet's transit is its arrival minus its media time; its variation is that minus the
smallest transit of the last ``window`` packets. The target (frames of ``frame_ticks``) is the
packet being played plus the ``quantile`` of the recent variations, within ``min_frames`` ..
``max_frames`` and never less than one packet more than the one being played (what
``min_frames=2`` is for 20 ms packets). It grows at once when jitter rises and shrinks by one
frame per ``shrink_interval_s`` when calm. Both windows are kept sorted as packets come
(:class:`SlidingWindow`): no sort per packet. ``jitter_s`` is the RFC 3550 interarrival
jitter. A transit jump above ``max_transit_jump_s`` (a timestamp discontinuity) restarts the
measurement instead of counting as jitter.
"""

from __future__ import annotations

import math

from gateway.receive.sliding_window import SlidingWindow


class JitterTarget:
    def __init__(
        self,
        *,
        min_frames: int,
        max_frames: int,
        frame_ticks: int,
        clock_rate: int,
        window: int,
        quantile: float,
        shrink_interval_s: float,
        max_transit_jump_s: float,
    ) -> None:
        self._min = min_frames
        self._max = max_frames
        self._frame_ticks = frame_ticks
        self._clock_rate = clock_rate
        self._quantile = quantile
        self._shrink_interval = shrink_interval_s
        self._max_transit_jump_s = max_transit_jump_s
        self._transits = SlidingWindow(window)
        self._variations = SlidingWindow(window)
        self.target = min_frames
        self.restart()

    @property
    def max_frames(self) -> int:
        return self._max

    def set_min(self, frames: int, *, release: bool = False) -> None:
        """A new floor; a target below it rises at once; with ``release`` one above it comes
        down to it (the next packet raises it to what the recent jitter needs)."""
        self._min = frames
        self.target = frames if release else max(self.target, frames)

    def restart(self) -> None:
        """A new timeline (sender restart): measure afresh, keep the target."""
        self._rebaseline()
        self.jitter_s = 0.0
        self._justified_at: float | None = None

    def _rebaseline(self) -> None:
        self._last_transit: float | None = None
        self._transits.clear()
        self._variations.clear()

    def measure(self, uts: int, arrival: float, packet_ticks: int) -> None:
        """One first transmission: ``uts`` its unwrapped timestamp, ``arrival`` in seconds."""
        transit = arrival - uts / self._clock_rate
        if self._last_transit is not None:
            d = abs(transit - self._last_transit)
            if d > self._max_transit_jump_s:
                self._rebaseline()  # timestamps jumped: a new timeline, not jitter
            else:
                self.jitter_s += (d - self.jitter_s) / 16.0  # RFC 3550 §6.4.1
        self._last_transit = transit
        # (the windows' ``minimum`` and ``quantile`` read from what ``add`` returns: once a
        # packet, no call more)
        change = transit - self._transits.add(transit)[0]
        ordered = self._variations.add(change)
        n = len(ordered)
        variation = ordered[min(n - 1, int(self._quantile * n))]
        packet_frames = packet_ticks / self._frame_ticks
        need_frames = packet_frames + variation * self._clock_rate / self._frame_ticks
        low = max(self._min, math.ceil(packet_frames - 1e-9) + 1)
        need = max(low, min(max(self._max, low), math.ceil(need_frames - 1e-9)))
        if need >= self.target:
            self.target = need
            self._justified_at = arrival
        elif self._justified_at is None:
            self._justified_at = arrival
        elif arrival - self._justified_at >= self._shrink_interval:
            self.target -= 1  # calm for a while: one frame less
            self._justified_at = arrival
