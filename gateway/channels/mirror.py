"""A mirror: a channel whose speaker is on another worker, aired here to this worker's
listeners. The frames travel once per worker: one link per (worker, channel), however many
listen here.

The link is an HTTP listener of the channel's own worker (``GET /v1/channels/{name}/listen
?format=frames&batch=1``: the aired Opus packets and the keep-alive silence, each written as
aired), so the origin treats it as any listener: its bounded queue, the lag policy (one second
behind: dropped, one second more: disconnected). Here the frames go to the mirror's own air
(``Air(relay=True)``: a bounded queue, a prebuffer of a few frames, this worker's 20 ms clock),
which hands them to the local listeners as the origin's air does. A second link reads the
origin's events (``/events``) and republishes utterance states, captions and words -- each
held until this worker has aired every frame that had come over the link when the event
came (the origin tells a word once it has aired it, and the link carries each frame as aired:
so a listener here never gets a word before its audio; the mirror's prebuffer is the lag).

The link ends -- the channel was deleted (its error record), its worker died or is unreachable
(the connection ends or fails) -- and the mirror closes with that reason: its listeners get
their end (HTTP: an error record; SSE: ``channel_closed``; WHEP: the peer connection closes).
A mirror with no listener left closes after ``idle_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.channels.air import Air
from gateway.channels.broadcast import Broadcast
from gateway.channels.events import ChannelEvents
from gateway.channels.listener import LagPolicy, Listener
from gateway.http.frame_records import EndRecord, ErrorRecord, FrameRecord, FrameRecordParser
from gateway.media.opus_codec import silence_packet

log = logging.getLogger(__name__)

REPUBLISHED = frozenset({"utterance", "interrupted", "caption", "word"})
MAX_HELD = 256  # republished events waiting for this worker's air to catch up
PREBUFFER_FRAMES = 3  # 60 ms: the link's jitter, absorbed once here
QUEUE_FRAMES = 25  # 0.5 s: the most a mirror holds
MAX_EVENT_LINE = 64 * 1024
#: on the frame link: the origin counts it as a mirror link, not a listener (its worker's
#: listeners are counted there: channels/census.py)
MIRROR_HEADER = "X-Channel-Mirror"


class Mirror(Broadcast):
    role = "mirror"

    def __init__(self, name: str, origin: str, http: aiohttp.ClientSession,
                 max_listeners: int, lag: LagPolicy, authorization: str | None = None,
                 idle_s: float = 5.0, self_url: str = "") -> None:
        air = Air(silence_packet(), QUEUE_FRAMES, relay=True, prebuffer=PREBUFFER_FRAMES)
        super().__init__(name, air, ChannelEvents(), max_listeners, lag)
        self.origin = origin.rstrip("/")
        self.http = http
        self.idle_s = idle_s
        self._headers = {"Authorization": authorization} if authorization else {}
        self._link_headers = {**self._headers, MIRROR_HEADER: self_url or "1"}
        self.link_frames = 0
        self.link_bytes = 0
        self.connected = asyncio.Event()  # the frame link answered 200
        self._tasks: list[asyncio.Task[None]] = []
        self._idle: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        self._held: deque[tuple[int, str, dict[str, Any]]] = deque()
        self.air.on_aired = self._release
        #: told once the mirror has closed (the registry forgets it)
        self.on_closed: Callable[[Mirror], None] | None = None

    def start(self) -> None:
        self.air.start()
        self._tasks = [
            asyncio.create_task(self._frames(), name=f"mirror-{self.name}-frames"),
            asyncio.create_task(self._events(), name=f"mirror-{self.name}-events"),
        ]
        self._arm_idle()

    # --- the links ---------------------------------------------------------------------------

    async def _frames(self) -> None:
        reason = "origin ended the stream"
        url = f"{self.origin}/v1/channels/{self.name}/listen"
        try:
            async with self.http.get(url, params={"format": "frames", "batch": "1"},
                                     headers=self._link_headers) as response:
                if response.status != 200:
                    reason = f"origin refused the link: HTTP {response.status}"
                    return
                self.connected.set()
                parser = FrameRecordParser()
                async for chunk in response.content.iter_any():
                    self.link_bytes += len(chunk)
                    for record in parser.feed(chunk):
                        if isinstance(record, FrameRecord):
                            self.link_frames += 1
                            self.air.feed(record.payload)
                        elif isinstance(record, ErrorRecord):
                            reason = f"origin: {record.message}"
                        elif isinstance(record, EndRecord):
                            return
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            reason = f"origin unreachable: {type(exc).__name__}: {exc}"
        finally:
            self.close_soon(reason)

    async def _events(self) -> None:
        url = f"{self.origin}/v1/channels/{self.name}/events"
        with contextlib.suppress(aiohttp.ClientError, OSError, ValueError):
            async with self.http.get(url, headers=self._headers) as response:
                if response.status != 200:
                    return
                kind: str | None = None
                while True:
                    line = await response.content.readline()
                    if not line:
                        return
                    if len(line) > MAX_EVENT_LINE:
                        continue
                    text = line.decode(errors="replace").rstrip("\r\n")
                    if text.startswith("event: "):
                        kind = text[7:]
                    elif text.startswith("data: ") and kind in REPUBLISHED:
                        with contextlib.suppress(ValueError, TypeError):
                            data = json.loads(text[6:])
                            if isinstance(data, dict):
                                self._hold(kind, data)
                        kind = None

    def _hold(self, kind: str, data: dict[str, Any]) -> None:
        """Republish once the frames the link had brought by now are aired here."""
        mark = self.link_frames - self.air.stats.link_dropped
        if not self._held and mark <= self.air.stats.taken:
            self.events.publish(kind, **data)
            return
        if len(self._held) >= MAX_HELD:  # bounded: the oldest goes out now
            _, old_kind, old = self._held.popleft()
            self.events.publish(old_kind, **old)
        self._held.append((mark, kind, data))

    def _release(self) -> None:
        taken = self.air.stats.taken
        held = self._held
        while held and held[0][0] <= taken:
            _, kind, data = held.popleft()
            self.events.publish(kind, **data)

    # --- listeners ---------------------------------------------------------------------------

    def join(self, listener: Listener) -> None:
        super().join(listener)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _left(self, listener: Listener) -> None:
        super()._left(listener)
        if not self.listeners:
            self._arm_idle()

    def _arm_idle(self) -> None:
        if self._idle is None and self.close_reason is None:
            self._idle = asyncio.get_running_loop().call_later(self.idle_s, self._on_idle)

    def _on_idle(self) -> None:
        self._idle = None
        if not self.listeners:
            self.close_soon("no listener left")

    # --- lifetime ----------------------------------------------------------------------------

    def close_soon(self, reason: str) -> None:
        if self._closing is None and self.close_reason is None:
            self._closing = asyncio.get_running_loop().create_task(self.close(reason))

    async def close(self, reason: str = "closed") -> None:
        if self.close_reason is not None:
            await self.closed.wait()
            return
        self.close_reason = reason
        log.info("channel mirror %s (of %s) closing: %s", self.name, self.origin, reason)
        try:
            if self._idle is not None:
                self._idle.cancel()
            current = asyncio.current_task()
            for task in self._tasks:
                if task is not current:
                    task.cancel()
            await self._close_listeners(reason)
            for task in self._tasks:
                if task is not current:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self._held.clear()  # not aired here: not heard
            self.air.on_aired = None
            self.events.publish("channel_closed", reason=reason)
            self.events.close()
        finally:
            self.closed.set()
            if self.on_closed is not None:
                self.on_closed(self)

    def state(self, listeners: int = 100) -> dict[str, Any]:
        return {**self.listeners_state(listeners), "origin": self.origin,
                "link": {"connected": self.connected.is_set(), "frames": self.link_frames,
                         "bytes": self.link_bytes}}
