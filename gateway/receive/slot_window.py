"""The jitter buffer's window of slots on one timeline: the packets buffered by unwrapped
sequence number, the playout point, where the last slot played ended, and the slots whose
playout time came (played, so duplicates are refused; or lost, so a late copy is known late).

It knows lengths and positions -- how long a missing slot was, how much media is buffered,
whether a packet's timestamp jumped past the last slot's end -- not when to play: that is
``JitterBuffer``'s policy. A resync (sender restart) starts a new window.
"""

from __future__ import annotations

from collections import deque

from gateway.receive.jitter_types import TICK_STEP, Packet
from gateway.receive.opus_packet import MAX_PACKET_TICKS


class SlotWindow:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.packets: dict[int, Packet] = {}  # unwrapped seq -> packet
        self.buffered_ticks = 0  # sum of their durations
        self.next: int | None = None  # unwrapped seq to play next
        self.newest: int | None = None
        self.play_end: int | None = None  # unwrapped timestamp where the last slot ended
        self._played: deque[int] = deque(maxlen=capacity)  # played or lost, in order
        self.played_set: set[int] = set()
        self.lost_set: set[int] = set()

    def add(self, useq: int, packet: Packet) -> None:
        self.packets[useq] = packet
        self.buffered_ticks += packet.duration
        if self.newest is None or useq > self.newest:
            self.newest = useq

    def take(self, useq: int) -> Packet | None:
        """The packet of slot ``useq`` out of the window (None: it is missing)."""
        packet = self.packets.pop(useq, None)
        if packet is not None:
            self.buffered_ticks -= packet.duration
        return packet

    def slide(self, new_next: int) -> int:
        """Keep the window within capacity: discard what falls out (how many), skip the empty
        head."""
        out = [s for s in self.packets if s < new_next]
        for useq in out:
            self.take(useq)
        self.next = min(self.packets)
        self.play_end = None  # the timeline broke here
        return len(out)

    def advance_end(self, packet: Packet | None, ticks: int) -> None:
        if packet is not None:
            self.play_end = packet.uts + ticks
        elif self.play_end is not None:
            self.play_end += ticks

    def ts_gap(self, packet: Packet, packet_ticks: int) -> int:
        """How far ``packet``'s timestamp jumped past the last slot's end (0: none)."""
        if self.play_end is None:
            return 0
        gap = packet.uts - self.play_end
        return gap if gap >= max(TICK_STEP, packet_ticks // 2) else 0

    def missing_ticks(self, useq: int, packet_ticks: int) -> int:
        """How long the missing slot ``useq`` was: the timestamp span to the next packet there
        is, shared by the slots missing before it; the stream's packet duration when that does
        not look like packets (a pause or a restart in between)."""
        assert self.newest is not None
        if self.play_end is not None:
            for later in range(useq + 1, self.newest + 1):
                packet = self.packets.get(later)
                if packet is not None:
                    each = (packet.uts - self.play_end) / (later - useq)
                    if TICK_STEP / 2 <= each <= MAX_PACKET_TICKS:
                        return max(TICK_STEP, round(each / TICK_STEP) * TICK_STEP)
                    break
        return packet_ticks

    def slot_ticks(self, useq: int, packet_ticks: int) -> int:
        packet = self.packets.get(useq)
        return self.missing_ticks(useq, packet_ticks) if packet is None else packet.duration

    def depth_ticks(self, packet_ticks: int) -> int:
        """Media from the playout point to the end of the newest packet (gaps at the stream's
        packet duration)."""
        if not self.packets or self.next is None or self.newest is None:
            return 0
        missing = self.newest - self.next + 1 - len(self.packets)
        return self.buffered_ticks + missing * packet_ticks

    def remember(self, useq: int, *, lost: bool = False) -> None:
        """A slot whose playout time came: played (duplicates of it are refused) or lost."""
        if len(self._played) == self._played.maxlen:
            oldest = self._played[0]
            self.played_set.discard(oldest)
            self.lost_set.discard(oldest)
        self._played.append(useq)
        (self.lost_set if lost else self.played_set).add(useq)
