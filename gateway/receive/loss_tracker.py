"""Which packets are missing: gaps on arrival, and packets overdue before any later one came.

The NACK generator only learns of a loss when a later packet arrives, 20 ms after the lost one
was due at best and a whole burst later at worst. Packets come every 20 ms, so one that is
``margin`` late past its due time (media time plus the typical transit) is missing now: ask at
once. Each overdue packet is asked for once here (the generator retries once it sees the gap).

Counts: ``lost`` is every sequence number that was missing past its due time or when a later
packet arrived (each once). A packet 250 frames ahead is a sender restart; three in a row that
far behind too; a single one is a stale repair and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.rtp.seqnum import SEQ_MASK, Unwrapper, seq_diff

FRAME_S = 0.020
_RESTART_FRAMES = 250


@dataclass(frozen=True, slots=True)
class Arrival:
    fills_gap: bool  # an older sequence number than the newest (reordered or repaired)
    asked_early: bool  # it had been asked for as overdue


class LossTracker:
    def __init__(self, window_frames: int = 10, max_asked: int = 64) -> None:
        self._window = window_frames
        self._max_asked = max_asked
        self._seqs = Unwrapper(16)
        self._newest: int | None = None
        self._newest_media: float | None = None
        self._far_behind = 0
        self._asked: dict[int, float] = {}  # unwrapped seq -> when it was asked for as overdue
        self.lost = 0
        self.asked_early = 0

    def on_packet(self, seq: int, media_time: float) -> Arrival:
        seq &= SEQ_MASK
        if self._newest is None or self._restarted(seq):
            self._seqs.reset()
            self._asked.clear()
            self._newest = self._seqs.unwrap(seq)
            self._newest_media = media_time
            return Arrival(False, False)
        if self._far_behind:
            return Arrival(False, False)
        useq = self._seqs.unwrap(seq)
        asked = self._asked.pop(useq, None) is not None
        if useq > self._newest:
            skipped = range(self._newest + 1, useq)
            self.lost += sum(1 for s in skipped if s not in self._asked)
            self._newest = useq
            self._newest_media = media_time
            return Arrival(False, asked)
        return Arrival(useq < self._newest, asked)

    def _restarted(self, seq: int) -> bool:
        assert self._newest is not None
        jump = seq_diff(seq, self._newest & SEQ_MASK)
        if -jump > _RESTART_FRAMES:
            self._far_behind += 1
            return self._far_behind >= 3
        self._far_behind = 0
        return jump > _RESTART_FRAMES

    def overdue(self, now: float, transit: float | None, margin: float) -> list[int]:
        """Sequence numbers after the newest that should have arrived ``margin`` ago (new ones)."""
        if self._newest is None or self._newest_media is None or transit is None:
            return []
        behind = int((now - transit - margin - self._newest_media) / FRAME_S + 1e-9)
        out: list[int] = []
        for k in range(1, min(behind, self._window) + 1):
            useq = self._newest + k
            if useq not in self._asked:
                self._asked[useq] = now
                out.append(useq & SEQ_MASK)
        self.lost += len(out)
        self.asked_early += len(out)
        while len(self._asked) > self._max_asked:
            del self._asked[next(iter(self._asked))]
        return out
