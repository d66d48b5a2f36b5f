"""What listeners join: an air, its listeners, its events -- a channel's or a mirror's.

``Channel`` (channel.py) airs its own speaker; ``Mirror`` (mirror.py) airs what the link to the
channel's worker brings. Both hand every aired frame to their listeners' own bounded queues and
end them all when they close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

from gateway.channels.air import Air
from gateway.channels.events import ChannelEvents
from gateway.channels.http_listener import MIRROR_LINK
from gateway.channels.listener import LagPolicy, Listener

log = logging.getLogger(__name__)


class ChannelFull(Exception):
    pass


class ChannelClosed(Exception):
    pass


class Broadcast:
    role = "origin"

    def __init__(self, name: str, air: Air, events: ChannelEvents, max_listeners: int,
                 lag: LagPolicy) -> None:
        self.name = name
        self.air = air
        self.events = events
        self.max_listeners = max_listeners
        self.lag = lag
        self.created_at = time.monotonic()
        self._listeners: dict[str, Listener] = {}
        self.joined_total = 0
        self.dropped_total = 0  # frames lost by listeners that have left
        self.left_reasons: Counter[str] = Counter()
        self.close_reason: str | None = None
        self.closed = asyncio.Event()

    def join(self, listener: Listener) -> None:
        """From the next aired frame on. Raises ChannelFull, ChannelClosed."""
        if self.close_reason is not None:
            raise ChannelClosed(f"channel {self.name!r} is closed")
        if len(self._listeners) >= self.max_listeners:
            raise ChannelFull(f"channel {self.name!r} has its maximum of "
                              f"{self.max_listeners} listeners")
        listener.on_closed = self._left
        self._listeners[listener.id] = listener
        self.air.add(listener)
        self.joined_total += 1
        self.events.publish("listener_joined", id=listener.id, transport=listener.transport,
                            listeners=len(self._listeners))

    def _left(self, listener: Listener) -> None:
        self.air.remove(listener)
        if self._listeners.pop(listener.id, None) is None:
            return
        reason = listener.close_reason or "closed"
        self.dropped_total += listener.dropped
        self.left_reasons[reason.split(":", 1)[0]] += 1
        self.events.publish("listener_left", id=listener.id, transport=listener.transport,
                            reason=reason, listeners=len(self._listeners))

    def listener(self, listener_id: str) -> Listener | None:
        return self._listeners.get(listener_id)

    @property
    def listeners(self) -> list[Listener]:
        return list(self._listeners.values())

    def count_by_transport(self) -> dict[str, int]:
        """This worker's listeners by transport; other workers' mirror links are not
        listeners (``mirror_links``): their listeners are counted where they are."""
        counts: dict[str, int] = {"whep": 0, "http": 0}
        for listener in self._listeners.values():
            if listener.transport != MIRROR_LINK:
                counts[listener.transport] = counts.get(listener.transport, 0) + 1
        return counts

    @property
    def mirror_links(self) -> int:
        return sum(1 for x in self._listeners.values() if x.transport == MIRROR_LINK)

    async def _close_listeners(self, reason: str) -> None:
        self.air.stop()
        results = await asyncio.gather(
            *(listener.close(f"channel closed: {reason}") for listener in self.listeners),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("channel %s: a listener's close failed: %r", self.name, result)

    def listeners_state(self, listeners: int = 100) -> dict[str, Any]:
        stats = self.air.stats
        return {
            "name": self.name,
            "role": self.role,
            "age_s": round(time.monotonic() - self.created_at, 3),
            "max_listeners": self.max_listeners,
            "listeners": self.count_by_transport(),
            "mirror_links": self.mirror_links,
            "event_subscribers": self.events.subscribers,
            "listeners_joined_total": self.joined_total,
            "listeners_left": dict(self.left_reasons),
            "air": {"frames_sent": stats.speech_frames, "silence_frames": stats.silence_frames,
                    "ticks": stats.ticks, "deliveries": stats.deliveries,
                    "decoded": stats.decoded, "rebases": stats.rebases,
                    "underruns": stats.underruns, "link_dropped": stats.link_dropped,
                    "max_late_ms": stats.max_late_ms, "queued": len(self.air.queue)},
            "listener_list": [listener.state() for listener in self.listeners[:listeners]],
        }
