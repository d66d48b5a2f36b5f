"""Ephemeral client keys (``POST /v1/realtime/client_secrets``): ``ek_…``, short-lived, bound
to the session config they were made with.

A backend holding a real token asks for one and hands it to a browser, which uses it as its
bearer for ``POST /v1/realtime/calls`` (or the Realtime WebSocket) and nothing else; the
session it opens starts from the key's config. A key lives 10 s to 2 h (600 s by default, as
OpenAI's) and may be used until then; at most ``MAX_KEYS`` live at once (the oldest go first),
expired ones are dropped as new ones are made.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_S, MAX_S, DEFAULT_S = 10, 7200, 600
MAX_KEYS = 10_000
PREFIX = "ek_"


@dataclass(frozen=True, slots=True)
class Grant:
    session: dict[str, Any] | None  # the session config the key is bound to (GA shape)
    expires_at: float  # wall-clock seconds


class EphemeralKeys:
    def __init__(self, clock: Callable[[], float] = time.time, max_keys: int = MAX_KEYS) -> None:
        self._clock = clock
        self._max = max_keys
        self._keys: OrderedDict[str, Grant] = OrderedDict()
        self.issued = 0

    def issue(self, session: dict[str, Any] | None, seconds: int = DEFAULT_S,
              prefix: str = "") -> tuple[str, int]:
        """A new key; ``prefix`` (the worker's session-id prefix) names where it is good, so a
        supervisor sends its calls there."""
        if not MIN_S <= seconds <= MAX_S:
            raise ValueError(f"expires_after.seconds must be from {MIN_S} to {MAX_S}")
        now = self._clock()
        while self._keys and next(iter(self._keys.values())).expires_at <= now:
            self._keys.popitem(last=False)  # keys expire in the order they were made
        value = PREFIX + prefix + secrets.token_urlsafe(24)
        expires_at = int(now + seconds)
        self._keys[value] = Grant(session, expires_at)
        while len(self._keys) > self._max:
            self._keys.popitem(last=False)
        self.issued += 1
        return value, expires_at

    def get(self, value: str) -> Grant | None:
        """The key's grant, or None: unknown or expired."""
        grant = self._keys.get(value)
        if grant is None:
            return None
        if grant.expires_at <= self._clock():
            del self._keys[value]
            return None
        return grant

    def __len__(self) -> int:
        return len(self._keys)
