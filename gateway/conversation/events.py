"""A session's events, to every listener: SSE subscribers and the ``events`` data channel.

``publish(type, data)`` hands the event to each subscriber's own bounded queue: a subscriber
that stops reading loses its oldest events (counted in ``dropped``), never blocks the
publisher, and never holds more than ``maxsize`` events. Event types (full duplex):
``speech_started``, ``speech_stopped`` (user VAD), ``transcript`` ``{text, final}`` (``overlap``:
heard over a reply and not answered), ``reply`` ``{text, utterance}``, ``reply_done`` ``{turn,
text, utterances}``, ``utterance`` ``{id, state}``, ``reply_paused`` / ``reply_resumed``
``{turn}`` (voice over a reply, before it is confirmed as a barge-in), ``interrupted``
``{utterance, heard_ms, heard_text}``, ``turn_continued`` ``{turn, continues}`` (a turn ended
too early, taken back: conversation/continuation.py), ``word`` ``{utterance, word, start_ms,
end_ms}`` (when the listener hears it begin: gateway.conversation.words), ``error`` ``{code,
message}``.

``word`` events cost a timer pass per playing session while they are followed, so they are only
made while someone takes them: ``wants_words`` is true while the bus has an SSE subscriber or a
callback registered with ``words=True`` (the ``events`` data channel); a callback that wants no
words (the Realtime responder: ``words=False``) is never handed one, and a session with only
such listeners computes none. ``on_words_wanted`` is told when that turns true.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.runtime.lazy_event import LazyEvent


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
        self._ready = LazyEvent()
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
        self._callbacks: list[tuple[Callable[[Event], None], bool]] = []  # (callback, words)
        self._word_callbacks = 0  # of ``_callbacks``, those that take word events
        #: called when ``wants_words`` turns true (the conversation's word events resume)
        self.on_words_wanted: Callable[[], None] | None = None
        self.published = 0

    @property
    def wants_words(self) -> bool:
        """Whether anyone takes ``word`` events: an SSE subscriber, a ``words=True`` callback."""
        return bool(self._subscriptions) or self._word_callbacks > 0

    def _words_wanted(self, before: bool) -> None:
        if not before and self.wants_words and self.on_words_wanted is not None:
            self.on_words_wanted()

    def subscribe(self, maxsize: int = 256) -> Subscription:
        if len(self._subscriptions) >= self.MAX_SUBSCRIBERS:
            raise OverflowError(f"at most {self.MAX_SUBSCRIBERS} event listeners per session")
        before = self.wants_words
        subscription = Subscription(self, maxsize)
        self._subscriptions.add(subscription)
        self._words_wanted(before)
        return subscription

    def on_event(self, callback: Callable[[Event], None], words: bool = True) -> None:
        """Call ``callback(event)`` for every event (the data channel's sender); ``words=False``:
        every event but ``word`` (and none is computed for this listener's sake)."""
        before = self.wants_words
        self._callbacks.append((callback, words))
        self._word_callbacks += words
        self._words_wanted(before)

    def publish(self, type: str, **data: Any) -> Event:
        event = Event(type, data, time.monotonic())
        self.published += 1
        for subscription in list(self._subscriptions):
            subscription._put(event)
        is_word = type == "word"
        for entry in list(self._callbacks):
            callback, words = entry
            if is_word and not words:
                continue
            try:
                callback(event)
            except Exception:  # a broken listener must not stop the others
                self._callbacks.remove(entry)
                self._word_callbacks -= words
        return event

    def close(self) -> None:
        for subscription in list(self._subscriptions):
            subscription.close()
        self._callbacks.clear()
        self._word_callbacks = 0
        self.on_words_wanted = None

    @property
    def subscribers(self) -> int:
        return len(self._subscriptions)
