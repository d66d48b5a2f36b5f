"""An HTTP listener: the channel's air written to a response body, live.

The air paces (a frame every 20 ms, the keep-alive silence between utterances), so the listener
only batches: every ``write_frames`` aired frames (60 ms by default; listeners spread over the
phases so their writes do not all fall on one tick) the queued frames go out as one chunk,
formatted by the same formatters the speech routes use (Ogg/Opus carrying the aired packets
unchanged, the framed stream, or PCM/WAV from the air's one decode). The write is a plain call
from the air's tick (``write_now``, the API's chunked writer: no task switch); when the socket
is not taking it (a reader that stopped reading) the listener's task writes that chunk with
backpressure, and meanwhile aired frames go to the queue, then are dropped -- the lag policy of
``Listener`` -- until the reader catches up or is closed as too slow (its connection aborted:
a stalled reader never holds its socket).

This is the session HTTP leg's ticked writer (session/http_leg.py) without the utterance: a
channel stream has no end of its own, it ends when the listener or the channel does.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable

from gateway.channels.listener import DEFAULT_LAG, LagPolicy, Listener
from gateway.http.formatters import FrameFormatter

Write = Callable[[bytes], Awaitable[None]]
WriteNow = Callable[[bytes], bool]
_phases = itertools.count()
MIRROR_LINK = "mirror"  # the transport of a mirror's link (a worker, not a listener)


class HttpListener(Listener):
    transport = "http"
    continuous = True

    def __init__(self, formatter: FrameFormatter, policy: LagPolicy = DEFAULT_LAG,
                 write_frames: int = 3, format_name: str = "opus",
                 mirror_link: bool = False) -> None:
        super().__init__(policy)
        if mirror_link:  # another worker's mirror: not a listener in the counts
            self.transport = MIRROR_LINK
        self.formatter = formatter
        self.needs_pcm = formatter.needs_pcm
        self.format = format_name
        self.write_frames = max(1, write_frames)
        self._phase = next(_phases) % self.write_frames
        self._write_now: WriteNow | None = None
        self._abort: Callable[[], None] = lambda: None
        self._wake: asyncio.Future[bytes | None] | None = None
        self._writing = False  # the task is writing a chunk (the reader is slow)
        self.writes = 0
        self.ticked_writes = 0
        self.bytes = 0

    async def run(self, write: Write, write_now: WriteNow,
                  abort: Callable[[], None]) -> None:
        """Write the stream until the listener closes; the format's end is written unless
        the connection had to be aborted."""
        self._write_now, self._abort = write_now, abort
        loop = asyncio.get_running_loop()
        try:
            await self._write(write, self.formatter.start() or b"")
            while self.close_reason is None:
                self._wake = loop.create_future()
                chunk = await self._wake
                if chunk is None:
                    break
                self._writing = True
                try:
                    await self._write(write, chunk)
                finally:
                    self._writing = False
            reason = self.close_reason or ""
            if reason.startswith("too_slow"):
                return  # aborted: nothing more can be written
            end = self.formatter.error("listener_closed", reason) if reason else b""
            await self._write(write, end or self.formatter.end())
        finally:
            self._wake = None
            if self.close_reason is None:
                self.close_reason = "client gone"
            self._ended()

    async def _write(self, write: Write, data: bytes) -> None:
        if data:
            self.writes += 1
            self.bytes += len(data)
            await write(data)

    def after_tick(self, tick: int) -> None:
        wake = self._wake
        if (self._writing or wake is None or wake.done()  # the task has a chunk to write
                or (tick + self._phase) % self.write_frames):
            return  # (a chunk written now would overtake it)
        queue = self.queue
        now = time.monotonic()
        parts: list[bytes] = []
        while True:
            run = queue.pop_run(len(queue))
            if run is None:
                break
            payloads, _, first = run
            parts.append(self.formatter.frames(payloads))
            self.owner.on_frames_sent(first, len(payloads), first & 0xFFFF, 0, now)
        data = b"".join(parts)
        if not data:
            return
        write_now = self._write_now
        if self.writes and write_now is not None and write_now(data):
            self.writes += 1
            self.ticked_writes += 1
            self.bytes += len(data)
            return
        wake.set_result(data)  # the task writes it, waiting for the reader

    def _end(self, reason: str) -> None:
        if reason.startswith("too_slow"):
            self._abort()  # a write may be waiting on the stalled reader: end it now
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)
        elif self._wake is None and self._write_now is None:
            self._ended()  # never started

    def state(self) -> dict[str, object]:
        return {**super().state(), "format": self.format, "writes": self.writes,
                "ticked_writes": self.ticked_writes, "bytes": self.bytes}
