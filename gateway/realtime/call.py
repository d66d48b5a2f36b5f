"""A Realtime WebRTC call: one of our WebRTC sessions whose hearing and answering are a
Realtime engine, with the client's ``oai-events`` data channel carrying the JSON events.

The session is made by the registry like any other (``hear=False``: no duplex loop of its
own), its one sendrecv audio m-line answered with our pinned Opus (NACK, RED as every
session), so the reply is the session's RTP stream and the microphone its receive path. The
call sits in the session's ``duplex`` slot: ``close`` and ``state`` are what the session asks
of it. Client messages are handled one at a time from a bounded queue (a flood past it is
answered with an error, not buffered); events are sent while the channel's own buffer is
under ``MAX_BUFFERED`` (a slow reader backs up into the engine's bounded outbox).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiortc import RTCDataChannel

from gateway.realtime.engine import RealtimeEngine
from gateway.realtime.protocol import ClientError, error_event

CHANNEL = "oai-events"
MAX_QUEUED = 256  # client messages waiting to be handled
MAX_BUFFERED = 1 << 20  # bytes the data channel may hold unsent


class RealtimeCall:
    def __init__(self, engine: RealtimeEngine, pc: Any) -> None:
        self.engine = engine
        self.channel: RTCDataChannel | None = None
        self._inbox: asyncio.Queue[str | bytes] = asyncio.Queue(MAX_QUEUED)
        self._opened = asyncio.Event()
        self._tasks = [asyncio.ensure_future(self._write()), asyncio.ensure_future(self._read())]
        self.messages_dropped = 0

        @pc.on("datachannel")
        def on_datachannel(channel: RTCDataChannel) -> None:
            if channel.label != CHANNEL or self.channel is not None:
                return
            self.channel = channel

            @channel.on("message")
            def on_message(message: str | bytes) -> None:
                try:
                    self._inbox.put_nowait(message)
                except asyncio.QueueFull:
                    self.messages_dropped += 1
                    engine.outbox.put(error_event(ClientError(
                        "too_many_events", f"more than {MAX_QUEUED} events are waiting to be "
                        "handled: this one was dropped")))

            if channel.readyState == "open":
                self._opened.set()
            channel.on("open", self._opened.set)

    def hear(self, pcm24k: Any) -> None:
        self.engine.hear(pcm24k)

    async def _write(self) -> None:
        await self._opened.wait()
        channel = self.channel
        assert channel is not None
        low = asyncio.Event()
        channel.bufferedAmountLowThreshold = MAX_BUFFERED // 2
        channel.on("bufferedamountlow", low.set)
        channel.on("close", low.set)
        while (text := await self.engine.outbox.get()) is not None:
            if channel.bufferedAmount > MAX_BUFFERED and channel.readyState == "open":
                low.clear()
                await low.wait()
            if channel.readyState != "open":
                return
            channel.send(text)

    async def _read(self) -> None:
        while True:
            message = await self._inbox.get()
            await self.engine.handle_text(message)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.engine.close()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task

    def state(self) -> dict[str, Any]:
        return {"realtime": self.engine.state(), "channel": None if self.channel is None
                else self.channel.readyState, "messages_dropped": self.messages_dropped}
