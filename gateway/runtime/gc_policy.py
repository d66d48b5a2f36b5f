"""Keep full garbage collections off the media path, and measure the pauses that remain.

Measured under load (bench/load.py, 100 streams): CPython's full collections took 70-95 ms,
long enough to stall every stream's pacing at once. Almost everything a session allocates lives
as long as the session, so the policy moves it out of the collector's sight when the session has
been set up (``gc.freeze``, O(1)): full collections then scan only young objects. Frozen garbage
(closed sessions' reference cycles) is reclaimed when the gateway is idle, or after
``collect_every`` closes at the latest (one full collection, with the frozen heap included).

Every collection's pause is timed (``gc.callbacks``) per generation and reported in /healthz,
so a stall can be told apart from CPU saturation. ``gc.get_freeze_count`` walks the whole
frozen list (O(objects)); it is read only after a reclaim, never per session.
"""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.runtime.metrics import METRICS

log = logging.getLogger(__name__)
SLOW_PAUSE_MS = 10.0  # collections longer than this are counted and logged


@dataclass
class GcStats:
    freezes: int = 0
    reclaims: int = 0
    last_reclaim_ms: float = 0.0
    frozen_objects: int = 0  # as of the last reclaim
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])  # per generation
    max_pause_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    pauses_over_10ms: int = 0


class GcPolicy:
    def __init__(self, enabled: bool = True, collect_every: int = 256) -> None:
        self.enabled = enabled
        self.collect_every = collect_every
        self._closes = 0
        self._started = 0.0
        self.stats = GcStats()
        gc.callbacks.append(self._on_gc)

    def close(self) -> None:
        """Stop timing collections (the policy's owner is going away)."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = int(info.get("generation", 0))
        pause_ms = (time.perf_counter() - self._started) * 1000
        stats = self.stats
        stats.collections[generation] += 1
        METRICS.gc_pauses.labels(str(generation)).observe(pause_ms / 1000)
        if pause_ms > stats.max_pause_ms[generation]:
            stats.max_pause_ms[generation] = round(pause_ms, 2)
        if pause_ms > SLOW_PAUSE_MS:
            stats.pauses_over_10ms += 1
            log.warning("gc generation %d paused the loop %.1f ms (collected %s, uncollectable %s)",
                        generation, pause_ms, info.get("collected"), info.get("uncollectable"))

    def freeze(self) -> None:
        """Call when long-lived state was just built (start-up done, a session set up)."""
        if self.enabled:
            gc.freeze()
            self.stats.freezes += 1

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
