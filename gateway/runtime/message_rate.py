"""A per-connection bound on how many messages a client may send a second (a token bucket).

The WebSocket doors (Realtime, ElevenLabs-compatible) bound each message's size; this bounds
their rate, so one socket cannot make the gateway parse and dispatch without limit. A message
over the rate is refused with an error the client sees (never silently dropped), and the
socket goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class MessageRate:
    def __init__(self, per_s: float, burst: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if per_s <= 0 or burst < 1:
            raise ValueError("per_s must be > 0 and burst >= 1")
        self.per_s = per_s
        self.burst = burst
        self._clock = clock
        self._tokens = burst
        self._at = clock()
        self.refused = 0

    def allow(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.refused += 1
        return False
