"""A Realtime connection as one of the registry's sessions: its id, caps, drain, idle sweep,
``GET``/``DELETE /v1/sessions/{id}``. It has no WebRTC leg of ours (``webrtc`` is None): its
transport is the Realtime WebSocket (or, for a call, the leg its engine is given).
"""

from __future__ import annotations

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


class RealtimeSession(teardown.ClosesOnce):
    _label = "realtime session"
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

    def _closing_steps(self) -> tuple[Callable[[], Any], ...]:
        return (self.engine.close, self.conversation.close)

    def _release(self) -> None:
        teardown.release_speech(self)
        gc_policy.watch_closed([self, self.conversation, self.speaker, self.engine])

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
