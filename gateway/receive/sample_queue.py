"""Decoded audio waiting for the playout clock, cut into 20 ms periods whatever the packets.

Each jitter-buffer slot decodes to its own length (a 10 ms packet to 240 samples, a 60 ms one to
1440); :class:`SampleQueue` keeps them in order and ``take`` hands out exactly one period of
samples, with the slots whose audio is in it (``pieces``) and those that start in it
(``started``: what the caller accounts once per slot). A period made of one whole slot is that
slot's array, not a copy.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gateway.receive.frame_decoder import FrameKind


@dataclass(slots=True)
class Decoded:
    """One slot's decoded audio."""

    kind: FrameKind
    seq: int | None
    timestamp: int | None
    payload: bytes | None
    pcm: np.ndarray
    ts_gap: int = 0  # RTP ticks the sender paused before it (see PopResult.ts_gap)
    peak: int = -1  # max |sample| of a FRAME's pcm when the decoder measured it (-1: not)

    @property
    def is_slot(self) -> bool:
        """Audio of a packet or of a lost one (not an underrun or inserted silence)."""
        return self.kind not in (FrameKind.UNDERRUN, FrameKind.INSERTED)


@dataclass(slots=True)
class Period:
    pcm: np.ndarray
    pieces: list[Decoded] = field(default_factory=list)
    started: list[Decoded] = field(default_factory=list)

    @property
    def main(self) -> Decoded:
        """What the period is recorded as: the newest slot in it, else its last piece."""
        for item in reversed(self.pieces):
            if item.seq is not None:
                return item
        return self.pieces[-1]

    @property
    def has_slot(self) -> bool:
        return any(item.is_slot for item in self.pieces)


class SampleQueue:
    def __init__(self) -> None:
        self._items: deque[Decoded] = deque()
        self._offset = 0  # samples of the head item already taken
        self._samples = 0

    @property
    def samples(self) -> int:
        return self._samples

    def push(self, item: Decoded) -> None:
        if item.pcm.size:
            self._items.append(item)
            self._samples += item.pcm.size

    def take(self, count: int) -> Period:
        """Exactly ``count`` samples (the caller pushed enough first)."""
        if count > self._samples:
            raise ValueError(f"{count} samples asked for, {self._samples} queued")
        head = self._items[0]
        if self._offset == 0 and head.pcm.size == count:  # the common case: one whole slot
            self._items.popleft()
            self._samples -= count
            return Period(head.pcm, [head], [head])
        out = np.empty(count, dtype=np.int16)
        period = Period(out)
        done = 0
        while done < count:
            item = self._items[0]
            if self._offset == 0:
                period.started.append(item)
            n = min(count - done, item.pcm.size - self._offset)
            out[done : done + n] = item.pcm[self._offset : self._offset + n]
            period.pieces.append(item)
            done += n
            self._offset += n
            if self._offset == item.pcm.size:
                self._items.popleft()
                self._offset = 0
        self._samples -= count
        return period
