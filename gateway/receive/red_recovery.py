"""RFC 2198 RED on the receive side: the primary plays as a plain packet would, the redundant
copies fill frames that are missing before NACK, FEC or PLC are tried.

:func:`split_red` numbers each redundant block by timestamp: walking back from the primary, a
block is the packet just before the next newer one when its timestamp plus its own duration
(libopus reads it: 10-60 ms, multi-frame packets too) is that packet's timestamp; it then has
the previous sequence number (``seq - offset / 960`` for 20 ms frames, and right for other
durations). The walk stops at the first block that does not join up (a pause in between, or a
sender whose copies skip packets): such a copy cannot be numbered safely, so it is not used.

:class:`RedRecovery` takes each copy whose slot the jitter buffer still wants
(``SlotState.MISSING``, i.e. lost or late and not yet due) and inserts it as that packet: it is
byte-identical to the original, so it decodes normally; its NACK is cancelled (the generator
stops asking, no RTT sample). A copy of a frame already held is ignored (no double play, not a
duplicate either); one whose frame was already played as lost is counted ``late``.

``needed_min_frames`` says how deep the jitter buffer must be for the oldest copy of a stream
to come in time: a copy ``offset`` ticks old arrives that much after its frame would have.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.nack.generator import NackGenerator
from gateway.receive.jitter_buffer import InsertResult, JitterBuffer, SlotState
from gateway.receive.opus_packet import packet_ticks
from gateway.rtp import red
from gateway.rtp.seqnum import SEQ_MASK

__all__ = ["MalformedRed", "RedCopy", "RedCounts", "RedRecovery", "split_red"]

MalformedRed = red.MalformedRed


@dataclass(frozen=True, slots=True)
class RedCopy:
    seq: int  # 16-bit sequence number the copy was sent under
    timestamp: int
    payload: bytes  # the Opus packet, byte for byte
    offset: int  # RTP ticks before the primary


def split_red(payload: bytes, seq: int, timestamp: int) -> tuple[bytes, list[RedCopy]]:
    """The primary and the redundant copies that can be numbered (oldest first).

    Raises :class:`MalformedRed` for a payload whose headers do not fit it."""
    blocks = red.decode(payload)
    copies: list[RedCopy] = []
    next_seq, next_ts = seq & SEQ_MASK, timestamp & 0xFFFFFFFF
    for block in reversed(blocks[:-1]):  # the newest copy first
        ts = (timestamp - block.timestamp_offset) & 0xFFFFFFFF
        ticks = packet_ticks(block.data)
        if ticks is None or block.timestamp_offset <= 0 or (next_ts - ts) & 0xFFFFFFFF != ticks:
            break
        next_seq = (next_seq - 1) & SEQ_MASK
        next_ts = ts
        copies.append(RedCopy(next_seq, ts, block.data, block.timestamp_offset))
    copies.reverse()
    return blocks[-1].data, copies


def needed_min_frames(offset: int, frame_ticks: int = RTP_TICKS_PER_FRAME) -> int:
    """Jitter-buffer frames for a copy ``offset`` ticks old to be in time (one frame more)."""
    return math.ceil(offset / frame_ticks) + 1


@dataclass
class RedCounts:
    packets: int = 0  # RED packets received
    recovered: int = 0  # missing frames rebuilt from a redundant copy
    late: int = 0  # copies that came after their frame was played as lost
    malformed: int = 0  # RED payloads that did not parse (dropped)


class RedRecovery:
    def __init__(self, jitter: JitterBuffer, nack: NackGenerator) -> None:
        self._jitter = jitter
        self._nack = nack
        self.counts = RedCounts()
        self.oldest_offset = 0  # of the copies seen so far (what the buffer depth must cover)

    def fill(self, copies: list[RedCopy], now: float) -> list[int]:
        """Insert the copies whose frames are missing; returns their sequence numbers."""
        filled: list[int] = []
        for copy in copies:
            self.oldest_offset = max(self.oldest_offset, copy.offset)
            state = self._jitter.slot_state(copy.seq)
            if state is SlotState.LATE:
                self.counts.late += 1
            if state is not SlotState.MISSING:
                continue
            result = self._jitter.insert(
                copy.seq, copy.timestamp, copy.payload, now,
                retransmitted=True,  # it comes late by design: not jitter
                duration=packet_ticks(copy.payload),
            )
            if result is InsertResult.ACCEPTED:
                self.counts.recovered += 1
                self._nack.on_recovered(copy.seq)
                filled.append(copy.seq)
        return filled
