"""The unit that flows from the encoder to the sinks: one encoded 20 ms frame and its owner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class FrameOwner(Protocol):
    """One sink's view of what a frame belongs to (an utterance's delivery to that sink, in
    practice): told when the sink has sent (or written) each frame, and asked whether the frames
    were cut off (barge-in), which a NACK responder then does not resend."""

    @property
    def cancelled(self) -> bool: ...

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None: ...

    def on_frames_sent(self, index: int, count: int, seq: int, timestamp: int, at: float) -> None:
        """``count`` consecutive frames from ``index`` (sequence numbers and timestamps from
        ``seq`` and ``timestamp``), all written at ``at`` (an HTTP write)."""
        ...


@dataclass(slots=True)
class EncodedFrame:
    payload: bytes  # one Opus packet, exactly as the encoder produced it
    owner: FrameOwner | None = None  # None for the keep-alive silence between utterances
    index: int = 0  # position within its owner's frames
