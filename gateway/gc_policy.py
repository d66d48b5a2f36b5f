"""Keep full garbage collections off the media path.

Measured under load (bench/load.py, 100 streams): CPython's full collections took 70-95 ms,
long enough to stall every stream's pacing at once. Almost everything a session allocates lives
as long as the session, so the policy moves it out of the collector's sight when the session has
been set up (``gc.freeze``, O(1)): full collections then scan only young objects. Frozen garbage
(closed sessions' reference cycles) is reclaimed when the gateway is idle, or after
``collect_every`` closes at the latest (one full collection, with the frozen heap included).
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass


@dataclass
class GcStats:
    freezes: int = 0
    reclaims: int = 0
    last_reclaim_ms: float = 0.0
    frozen_objects: int = 0


class GcPolicy:
    def __init__(self, enabled: bool = True, collect_every: int = 256) -> None:
        self.enabled = enabled
        self.collect_every = collect_every
        self._closes = 0
        self.stats = GcStats()

    def freeze(self) -> None:
        """Call when long-lived state was just built (start-up done, a session set up)."""
        if self.enabled:
            gc.freeze()
            self.stats.freezes += 1
            self.stats.frozen_objects = gc.get_freeze_count()

    def session_closed(self, remaining: int) -> None:
        if not self.enabled:
            return
        self._closes += 1
        if remaining == 0 or self._closes >= self.collect_every:
            self.reclaim()

    def reclaim(self) -> None:
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._closes = 0
        self.stats.reclaims += 1
        self.stats.last_reclaim_ms = round((time.perf_counter() - started) * 1000, 2)
        self.stats.frozen_objects = gc.get_freeze_count()
