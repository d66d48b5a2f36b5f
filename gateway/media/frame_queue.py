"""The bounded hand-off between the encoder (producer) and the paced track (consumer).

Its bound is the backpressure: synthesis runs ahead of playout by at most ``maxsize`` frames
(50 = 1 s), so memory stays flat for any text length. ``clear`` empties it at once (barge-in).
"""

from __future__ import annotations

import asyncio
from collections import deque

from gateway.media.frames import EncodedFrame


class FrameQueue:
    def __init__(self, maxsize: int = 50) -> None:
        if maxsize <= 0:
            raise ValueError("maxsize must be positive")
        self.maxsize = maxsize
        self._frames: deque[EncodedFrame] = deque()
        self._space = asyncio.Event()
        self._space.set()
        self.high_water = 0

    def __len__(self) -> int:
        return len(self._frames)

    async def put(self, frame: EncodedFrame) -> None:
        """Append, waiting while the queue is full."""
        while len(self._frames) >= self.maxsize:
            self._space.clear()
            await self._space.wait()
        self._frames.append(frame)
        self.high_water = max(self.high_water, len(self._frames))

    def pop(self) -> EncodedFrame | None:
        """The next frame, or None when empty (the consumer never waits on the producer)."""
        if not self._frames:
            return None
        frame = self._frames.popleft()
        if len(self._frames) < self.maxsize:
            self._space.set()
        return frame

    def clear(self) -> list[EncodedFrame]:
        """Drop everything queued; return what was dropped."""
        dropped = list(self._frames)
        self._frames.clear()
        self._space.set()
        return dropped
