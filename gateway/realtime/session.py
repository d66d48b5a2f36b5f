"""A Realtime connection as one of the registry's sessions: its id, caps, drain, idle sweep,
``GET``/``DELETE /v1/sessions/{id}``. It has no WebRTC leg of ours (``webrtc`` is None): its
transport is the Realtime WebSocket (or, for a call, the leg its engine is given).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.conversation import teardown
from gateway.conversation.conversation import Conversation
from gateway.realtime.engine import RealtimeEngine
from gateway.runtime import gc_policy
from gateway.speech.speaker import Speaker

log = logging.getLogger(__name__)


class RealtimeSession:
    webrtc = None  # the registry's WebRTC-only counters skip it
    duplex = None

    def __init__(self, session_id: str, conversation: Conversation, engine: RealtimeEngine,
                 transport: str, on_closed: Callable[[Any], None] | None = None) -> None:
        self.id = session_id
        self.conversation = conversation
        self.engine = engine
        self.transport = transport
        self.created_at = time.monotonic()
        self.last_activity = self.created_at
        self._close = teardown.CloseOnce()
        self._on_closed = on_closed

    @property
    def speaker(self) -> Speaker:
        return self.conversation.speaker

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds with no request, no client event but appends (a microphone streaming
        silence is idle), no speech heard and nothing being answered."""
        if self.engine.busy or not self.speaker.idle.is_set():
            self.last_activity = now
        return now - max(self.last_activity, self.engine.last_activity)

    @property
    def closed(self) -> asyncio.Event:
        """Set once the session has closed."""
        return self._close.closed

    @property
    def close_reason(self) -> str | None:
        return self._close.reason

    def close_soon(self, reason: str) -> None:
        self._close.soon(self.close, reason)

    async def close(self, reason: str = "closed") -> None:
        if not await self._close.begin(reason):
            return
        log.info("realtime session %s closing: %s", self.id, reason, extra={"session": self.id})
        try:
            await teardown.close_steps(f"realtime session {self.id}",
                                       (self.engine.close, self.conversation.close))
        finally:
            self._close.finish()
            if self._on_closed is not None:
                self._on_closed(self)
            self._on_closed = None
            try:  # its reference cycles cut: refcounting frees it (no full collection)
                teardown.release_speech(self)
                gc_policy.watch_closed([self, self.conversation, self.speaker, self.engine])
            except Exception:
                log.exception("realtime session %s: teardown failed", self.id)

    def state(self) -> dict[str, Any]:
        speaker = self.speaker
        return {
            "id": self.id, "age_s": round(time.monotonic() - self.created_at, 3),
            "transport": self.transport, "realtime": self.engine.state(),
            "utterances": {"pending": speaker.pending,
                           "current": speaker.current.id if speaker.current else None,
                           **dict(speaker.counts),
                           "recent": [u.as_json() for u in list(speaker.recent)[-10:]]},
            "duplex": None,
        }
