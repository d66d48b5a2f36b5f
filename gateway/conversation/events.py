"""A session's events, to every listener: SSE subscribers and the ``events`` data channel.

``publish(type, data)`` hands the event to each subscriber's own bounded queue: a subscriber
that stops reading loses its oldest events (counted in ``dropped``), never blocks the
publisher, and never holds more than ``maxsize`` events. Event types (full duplex):
``speech_started``, ``speech_stopped`` (user VAD), ``transcript`` ``{text, final}`` (``overlap``:
heard over a reply and not answered), ``reply`` ``{text, utterance}``, ``reply_done`` ``{turn,
text, utterances}``, ``utterance`` ``{id, state}``, ``reply_paused`` / ``reply_resumed``
``{turn}`` (voice over a reply, before it is confirmed as a barge-in), ``interrupted``
``{utterance, heard_ms, heard_text}``, ``word`` ``{utterance, word, start_ms, end_ms}`` (when
the listener hears it begin: gateway.conversation.words), ``error`` ``{code, message}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    data: dict[str, Any]
    at: float  # time.monotonic()

    def json(self) -> str:
        return json.dumps(self.data, separators=(",", ":"))

    def sse(self) -> bytes:
        return f"event: {self.type}\ndata: {self.json()}\n\n".encode()

    def message(self) -> str:
        """One data-channel message: ``{"type": ..., **data}``."""
        return json.dumps({"type": self.type, **self.data}, separators=(",", ":"))


class Subscription:
    def __init__(self, bus: EventBus, maxsize: int) -> None:
        self._bus = bus
        self._events: deque[Event] = deque(maxlen=maxsize)
        self._ready = asyncio.Event()
        self.dropped = 0
        self.closed = False

    def _put(self, event: Event) -> None:
        if len(self._events) == self._events.maxlen:
            self.dropped += 1
        self._events.append(event)
        self._ready.set()

    async def get(self) -> Event | None:
        """The next event; None once the subscription (or the bus) is closed."""
        while not self._events:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()

    def close(self) -> None:
        self.closed = True
        self._ready.set()
        self._bus._subscriptions.discard(self)


class EventBus:
    MAX_SUBSCRIBERS = 16

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self._callbacks: list[Callable[[Event], None]] = []
        self.published = 0

    def subscribe(self, maxsize: int = 256) -> Subscription:
        if len(self._subscriptions) >= self.MAX_SUBSCRIBERS:
            raise OverflowError(f"at most {self.MAX_SUBSCRIBERS} event listeners per session")
        subscription = Subscription(self, maxsize)
        self._subscriptions.add(subscription)
        return subscription

    def on_event(self, callback: Callable[[Event], None]) -> None:
        """Call ``callback(event)`` for every event (the data channel's sender)."""
        self._callbacks.append(callback)

    def publish(self, type: str, **data: Any) -> Event:
        event = Event(type, data, time.monotonic())
        self.published += 1
        for subscription in list(self._subscriptions):
            subscription._put(event)
        for callback in list(self._callbacks):
            try:
                callback(event)
            except Exception:  # a broken listener must not stop the others
                self._callbacks.remove(callback)
        return event

    def close(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.close()
        self._callbacks.clear()

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)
