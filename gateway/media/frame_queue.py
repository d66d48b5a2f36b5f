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
        self._arrival: asyncio.Future[None] | None = None
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
        waiter = self._arrival
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
            # The consumer is idle and waiting for exactly this frame: let it run now rather
            # than after the producer has encoded the rest of its chunk.
            await asyncio.sleep(0)

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

    def notify_arrival(self, waiter: asyncio.Future[None] | None) -> None:
        """Resolve ``waiter`` when the next frame is queued (None: stop notifying)."""
        self._arrival = waiter

    async def wait_arrival(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for a frame to be queued; True if one is there."""
        if self._frames:
            return True
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._arrival = waiter
        handle = loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._arrival = None
        return bool(self._frames)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
