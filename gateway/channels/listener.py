"""One listener of a channel: its own bounded queue of aired frames and the lag policy.

The channel's ``Air`` offers each aired frame to every listener (``offer``), never waiting: a
listener whose queue is full loses that frame (counted) and is *behind*; one that stays behind
for ``drop_after`` consecutive frames is closed with a reason (``too_slow``). A listener that
catches up again (a frame found room) is no longer behind: it hears a gap, not an end. So the
memory a listener holds is its queue's bound, and a slow one never slows the air or the others.

Transports (WHEP: ``whep_listener.py``; HTTP: ``http_listener.py``) subclass it: they drain the
queue their own way and say how they end (``_end``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.media.frame_queue import FrameQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LagPolicy:
    queue_frames: int = 50  # the most a listener holds (1 s of audio)
    drop_after: int = 50  # consecutive frames lost (1 s behind the bound): closed


DEFAULT_LAG = LagPolicy()


class AirOwner:
    """The ``FrameOwner`` of aired frames at one listener: counts what its sink sent.

    Aired frames are never cancelled (they are on air already): a NACK for one is answered."""

    __slots__ = ("frames_sent", "last_sent_at")

    cancelled = False

    def __init__(self) -> None:
        self.frames_sent = 0
        self.last_sent_at: float | None = None

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        self.frames_sent += 1
        self.last_sent_at = at

    def on_frames_sent(self, index: int, count: int, seq: int, timestamp: int, at: float) -> None:
        self.frames_sent += count
        self.last_sent_at = at


class Listener:
    transport = "?"
    needs_pcm = False  # takes the aired frames decoded (24 kHz s16le), not Opus
    continuous = False  # takes the keep-alive silence between utterances too (a byte stream)

    def __init__(self, policy: LagPolicy, listener_id: str | None = None) -> None:
        self.id = listener_id or secrets.token_urlsafe(9)
        self.policy = policy
        self.queue = FrameQueue(policy.queue_frames)
        self.owner = AirOwner()
        self.joined_at = time.monotonic()
        self.frames_in = 0  # frames offered
        self.dropped = 0  # ... that found the queue full
        self.behind = 0  # consecutive such frames
        self.first_air_index: int | None = None  # the first aired frame it got (a late joiner)
        self.closed = asyncio.Event()
        self.close_reason: str | None = None
        #: told once when the listener ends (the channel forgets it, publishes the leave)
        self.on_closed: Callable[[Listener], None] | None = None

    def offer(self, payload: bytes, air_index: int) -> None:
        """One aired frame (from the air's tick: must not block)."""
        if self.close_reason is not None:
            return
        if self.first_air_index is None:
            self.first_air_index = air_index
        self.frames_in += 1
        if self.queue.offer((payload,), self.owner, air_index):
            self.behind = 0
            return
        self.dropped += 1
        self.behind += 1
        if self.behind >= self.policy.drop_after:
            self.close_soon(f"too_slow: {self.dropped} frames lost, "
                            f"{len(self.queue)} frames behind")

    def after_tick(self, tick: int) -> None:
        """Called by the air after each tick's offers (an HTTP writer's cadence)."""

    def close_soon(self, reason: str) -> None:
        """End the listener (idempotent; from any callback): the transport's end runs in a
        task owned by the listener's own run or closing."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        log.info("channel listener %s (%s) closing: %s", self.id, self.transport, reason)
        self.queue.clear()
        self._end(reason)

    def _end(self, reason: str) -> None:
        """The transport's own end; must call ``_ended`` once it is over."""
        self._ended()

    def _ended(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        if self.on_closed is not None:
            self.on_closed(self)

    async def close(self, reason: str) -> None:
        self.close_soon(reason)
        await self.closed.wait()

    def state(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "transport": self.transport,
            "age_s": round(time.monotonic() - self.joined_at, 3),
            "frames_in": self.frames_in,
            "frames_sent": self.owner.frames_sent,
            "dropped": self.dropped,
            "queued": len(self.queue),
            "first_air_index": self.first_air_index,
            "close_reason": self.close_reason,
        }
