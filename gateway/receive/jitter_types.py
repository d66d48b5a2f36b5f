"""What the jitter buffer takes and answers: its results, slot states, counters and packets
(``jitter_buffer`` says how they are used)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

TICK_STEP = 120  # 2.5 ms at 48 kHz: the finest Opus frame, and PLC's granularity


class PopKind(enum.Enum):
    FRAME = "frame"
    LOST = "lost"
    UNDERRUN = "underrun"


class InsertResult(enum.Enum):
    ACCEPTED = "accepted"
    LATE = "late"
    DUPLICATE = "duplicate"


class SlotState(enum.Enum):
    """What :meth:`JitterBuffer.slot_state` says of a sequence number (for RED's copies)."""

    MISSING = "missing"  # between the playout point and the newest, not buffered: fill it
    HELD = "held"  # buffered, or already played
    LATE = "late"  # its playout time passed while it was missing (played as lost, or skipped)
    PASSED = "passed"  # behind the playout point, not known (before the start, or forgotten)
    AHEAD = "ahead"  # newer than the newest packet, or no stream yet


@dataclass(frozen=True, slots=True)
class PopResult:
    kind: PopKind
    seq: int | None = None  # 16-bit seq of the slot played (FRAME) or missing (LOST)
    timestamp: int | None = None  # RTP timestamp (FRAME only)
    payload: bytes | None = None  # FRAME only
    fec_payload: bytes | None = None  # LOST only: payload of seq + 1, if already buffered
    duration: int = 0  # RTP ticks the slot stands for (0: unknown, one frame)
    ts_gap: int = 0  # FRAME only: timestamp jump before it with no sequence gap (a pause)


UNDERRUN = PopResult(PopKind.UNDERRUN)


@dataclass
class JitterStats:
    received: int = 0  # every insert() call
    late: int = 0  # arrived after its playout point (played out as lost, or skipped)
    duplicate: int = 0
    lost: int = 0  # slots missing at playout time (concealed, FEC'd or skipped)
    dropped: int = 0  # buffered packets discarded to cut latency or on overflow
    played: int = 0
    underruns: int = 0  # transitions from playing to underrun (pauses included)
    pauses: int = 0  # ... of those, resumed on a timestamp jump with no sequence gap
    resyncs: int = 0  # stream (re)starts: the first packet, and jumps of >= resync_frames
    target_frames: int = 0
    depth: int = 0  # frames (20 ms) from the playout point to the end of the newest packet
    jitter_ms: float = 0.0


@dataclass(slots=True)
class Packet:
    """A buffered packet."""

    seq: int
    timestamp: int
    uts: int  # unwrapped timestamp
    duration: int  # RTP ticks
    payload: bytes
    arrival: float
