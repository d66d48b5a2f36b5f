"""The played audio as a source: 20 ms frames of s16 mono (24 kHz, or the receive path's
``sample_rate``), pulled or pushed.

Every playout period hands its frame to :class:`PcmSource`, which

* keeps the last ``ring_frames`` unread frames in a ring for a consumer that pulls: ``read()``
  (the oldest unread frame, or None), ``await wait()`` (until there is one) or ``async for``;
  a consumer that falls behind loses the oldest frames, counted in ``dropped``;
* calls every ``on_frame`` callback with the frame, synchronously on the playout tick (keep
  them short: a WAV writer, a resampler feeding a VAD). A callback that raises is logged and
  counted (``callback_errors``) and playout goes on.

Frames are read-only arrays of exactly ``frame_samples`` (480 at 24 kHz) samples; silence
during stalls and pauses is part of the stream, so the frames stay on the 20 ms clock.
``close()`` (by the receive path) ends the stream: ``wait`` and the iterator finish once the
ring is drained.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import numpy as np

from gateway.media.opus_codec import FRAME_MS, SAMPLE_RATE
from gateway.receive.frame_decoder import FrameKind

log = logging.getLogger(__name__)

FrameCallback = Callable[["PcmFrame"], None]


class ReceivePathClosed(RuntimeError):
    """The receive path was closed: no more playout periods or frames will come."""


@dataclass(frozen=True, slots=True)
class PcmFrame:
    index: int  # playout period number, from 0
    at: float  # time.monotonic() when it was played
    kind: FrameKind  # what the period played (see PlayedPeriod)
    seq: int | None  # 16-bit seq of the newest packet in it (None: underrun, inserted)
    pcm: np.ndarray  # frame_samples int16 samples at the source's sample_rate, read-only


class PcmSource:
    sample_rate = SAMPLE_RATE  # (the class's: the default; an instance's is its path's)
    frame_samples = SAMPLE_RATE * FRAME_MS // 1000

    def __init__(self, ring_frames: int = 4, sample_rate: int = SAMPLE_RATE) -> None:
        if ring_frames < 0:
            raise ValueError("ring_frames must be >= 0")
        self.sample_rate = sample_rate
        self.frame_samples = sample_rate * FRAME_MS // 1000
        self._ring: deque[PcmFrame] = deque()
        self._ring_frames = ring_frames
        self._callbacks: list[FrameCallback] = []
        self._readable = asyncio.Event()
        self._closed = False
        self.dropped = 0  # frames pushed out of the ring unread
        self.callback_errors = 0

    # -- consumers ------------------------------------------------------------------------

    def read(self) -> PcmFrame | None:
        """The oldest unread frame, or None when there is none (never blocks)."""
        if not self._ring:
            return None
        frame = self._ring.popleft()
        if not self._ring:
            self._readable.clear()
        return frame

    async def wait(self) -> PcmFrame:
        """The oldest unread frame, once there is one; ReceivePathClosed after the end."""
        if self._ring_frames == 0:
            raise RuntimeError("the PCM ring is off (pcm_ring_frames=0): use on_frame")
        while True:
            frame = self.read()
            if frame is not None:
                return frame
            if self._closed:
                raise ReceivePathClosed("receive path closed")
            await self._readable.wait()

    def __aiter__(self) -> AsyncIterator[PcmFrame]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[PcmFrame]:
        while True:
            try:
                yield await self.wait()
            except ReceivePathClosed:
                return

    def on_frame(self, callback: FrameCallback) -> Callable[[], None]:
        """Call ``callback(frame)`` for every frame played from now on; returns the undo."""
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    @property
    def buffered(self) -> int:
        """Unread frames in the ring."""
        return len(self._ring)

    @property
    def closed(self) -> bool:
        return self._closed

    # -- producer (the playout) -----------------------------------------------------------

    def push(self, frame: PcmFrame) -> None:
        if self._closed:
            return
        if self._ring_frames:
            if len(self._ring) >= self._ring_frames:
                self._ring.popleft()
                self.dropped += 1
            self._ring.append(frame)
            self._readable.set()
        for callback in list(self._callbacks):
            try:
                callback(frame)
            except Exception:  # one consumer's bug must not stop playout or the others
                self.callback_errors += 1
                if self.callback_errors == 1 or self.callback_errors % 1000 == 0:
                    log.exception("PCM frame callback failed (%d so far)", self.callback_errors)

    def close(self) -> None:
        self._closed = True
        self._callbacks.clear()
        self._readable.set()  # wake waiters: they drain the ring, then see the end
