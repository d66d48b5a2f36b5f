"""Which packets are missing: gaps in the sequence numbers, seen when a later packet arrives.

Only a gap is a loss. Packets that stop coming are not: a sender pauses (Opus DTX sends one
packet per 400 ms, a muted microphone none for seconds) and resumes on the next sequence number
with a later timestamp. Asking for packets after the newest one would ask for packets that were
never sent (and a sender that answers with a concealment packet would then collide with the
real one), so nothing here looks at the clock.

Counts: ``lost`` is every sequence number skipped when a later one arrived (each once; one that
arrives after all is reported as ``fills_gap``, reordered or repaired). A packet 250 numbers
ahead is a sender restart; three in a row that far behind too; a single one is a stale repair
and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.rtp.seqnum import SEQ_MASK, Unwrapper, seq_diff

_RESTART_FRAMES = 250


@dataclass(frozen=True, slots=True)
class Arrival:
    fills_gap: bool  # an older sequence number than the newest (reordered or repaired)
    gap: int = 0  # sequence numbers this packet showed missing (a new loss burst's length)


_IN_ORDER = Arrival(False)


class LossTracker:
    def __init__(self) -> None:
        self._seqs = Unwrapper(16)
        self._newest: int | None = None
        self._far_behind = 0
        self.lost = 0

    def on_packet(self, seq: int) -> Arrival:
        seq &= SEQ_MASK
        if self._newest is None or self._restarted(seq):
            self._seqs.reset()
            self._newest = self._seqs.unwrap(seq)
            return Arrival(False)
        if self._far_behind:
            return Arrival(False)
        useq = self._seqs.unwrap(seq)
        if useq > self._newest:
            gap = useq - self._newest - 1
            self.lost += gap
            self._newest = useq
            return Arrival(False, gap) if gap else _IN_ORDER
        return Arrival(useq < self._newest)

    def _restarted(self, seq: int) -> bool:
        assert self._newest is not None
        jump = seq_diff(seq, self._newest & SEQ_MASK)
        if -jump > _RESTART_FRAMES:
            self._far_behind += 1
            return self._far_behind >= 3
        self._far_behind = 0
        return jump > _RESTART_FRAMES
