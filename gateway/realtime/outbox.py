"""The server events waiting for the transport: bounded, with backpressure on audio.

Control events (``put``) are small and never wait; audio deltas wait for room first
(``wait_room``: the pump of a reader that stopped reading stops, so the speaker's bounded sink
fills and synthesis waits -- memory stays flat). A reader so far behind that even control
events pile up past ``hard`` is cut off (``overflowed``): the transport closes the connection.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from typing import Any

Translate = Callable[[dict[str, Any]], dict[str, Any] | None]


class Outbox:
    def __init__(self, soft: int = 32, hard: int = 2048,
                 translate: Translate | None = None) -> None:
        self.soft, self.hard = soft, hard
        self.translate = translate  # the beta dialect's renames (None: GA as it is)
        self._queue: deque[str] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self.closed = False
        self.overflowed = False
        self.sent = 0
        self.high_water = 0
        #: other readers of the same events (a call's control sockets), each bounded alike
        self.watchers: list[Outbox] = []

    def __len__(self) -> int:
        return len(self._queue)

    def put(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        for watcher in list(self.watchers):
            watcher.put(event)
            if watcher.closed:
                self.watchers.remove(watcher)
        if self.translate is not None:
            translated = self.translate(event)
            if translated is None:
                return
            event = translated
        if len(self._queue) >= self.hard:
            self.overflowed = True
            self.close()
            return
        self._queue.append(json.dumps(event, separators=(",", ":")))
        self.high_water = max(self.high_water, len(self._queue))
        if len(self._queue) >= self.soft:
            self._room.clear()
        self._ready.set()

    async def wait_room(self) -> None:
        """Until fewer than ``soft`` events wait (at once when closed)."""
        while not self._room.is_set() and not self.closed:
            await self._room.wait()

    async def get(self) -> str | None:
        """The next serialized event; None once closed and empty."""
        while not self._queue:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        text = self._queue.popleft()
        self.sent += 1
        if len(self._queue) < self.soft:
            self._room.set()
        return text

    def close(self) -> None:
        for watcher in self.watchers:
            watcher.close()
        self.watchers.clear()
        self.closed = True
        self._ready.set()
        self._room.set()
