"""The per-stream store of sent RTP packets, keyed by 16-bit RTP sequence number.

It holds the last ``capacity`` packets (250 = 5 s of 20 ms frames) for retransmission. Slots are
a fixed ring of 256 (a power of two, so ``seq & 255`` stays continuous across the 65535 -> 0
wrap); an entry counts only while it is among the newest ``capacity`` sequence numbers, so the
window is exact, O(1) per packet and bounded whatever the stream length.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.media.frames import EncodedFrame

RING = 256
DEFAULT_CAPACITY = 250


@dataclass(slots=True)
class StoredPacket:
    seq: int
    timestamp: int
    packet: Any  # aiortc RtpPacket, resent unchanged
    frame: EncodedFrame | None
    sent_at: float


class FrameStore:
    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not 0 < capacity <= RING:
            raise ValueError(f"capacity must be 1..{RING}")
        self.capacity = capacity
        self._clock = clock
        self._ring: list[StoredPacket | None] = [None] * RING
        self._newest: int | None = None
        self.next_frame: EncodedFrame | None = None  # set by the track just before aiortc sends
        self.recorded = 0

    def record(self, packet: Any) -> StoredPacket:
        """Keep a packet aiortc is about to send; attributes it to ``next_frame``."""
        seq = int(packet.sequence_number)
        frame, self.next_frame = self.next_frame, None
        entry = StoredPacket(seq, int(packet.timestamp), packet, frame, self._clock())
        self._ring[seq & (RING - 1)] = entry
        self._newest = seq
        self.recorded += 1
        if frame is not None and frame.owner is not None:
            frame.owner.on_frame_sent(frame, seq, entry.timestamp, entry.sent_at)
        return entry

    def lookup(self, seq: int) -> StoredPacket | None:
        """The stored packet for ``seq`` if it is within the window, else None."""
        if self._newest is None:
            return None
        age = (self._newest - seq) & 0xFFFF
        if age >= self.capacity:
            return None
        entry = self._ring[seq & (RING - 1)]
        if entry is None or entry.seq != seq:
            return None
        return entry

    @property
    def newest_seq(self) -> int | None:
        return self._newest

    def __len__(self) -> int:
        return min(self.recorded, self.capacity)

    # The mapping protocol aiortc's sender uses for its history (see gateway.aiortc_compat).
    def __setitem__(self, key: int, packet: Any) -> None:
        self.record(packet)

    def get(self, key: int, default: Any = None) -> Any:
        entry = self.lookup(key & 0xFFFF)
        return default if entry is None else entry.packet
