"""The unit that flows from the encoder to RTP: one encoded 20 ms frame and what it belongs to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class FrameOwner(Protocol):
    """Told when its frames reach RTP (an utterance, in practice)."""

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None: ...


@dataclass(slots=True)
class EncodedFrame:
    payload: bytes  # one Opus packet, exactly as the encoder produced it
    owner: FrameOwner | None = None  # None for the keep-alive silence between utterances
    index: int = 0  # position within its owner's frames
