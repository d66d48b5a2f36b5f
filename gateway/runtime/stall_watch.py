"""Find what blocks the event loop: a watchdog thread that reports loop stalls with a stack.

Every stream of the process is paced by the one event loop, so anything that holds it (a
synchronous call, a burst of work, a full garbage collection) delays every stream at once. The
loop stamps a heartbeat every ``period``; a daemon thread checks it and, when the loop has not
come back for ``threshold`` seconds, logs the main thread's stack at that moment (once per
stall) and counts the stall. Off unless ``--stall-warn-ms`` is set (the thread's wake-ups cost a
little GIL traffic).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from gateway.runtime.metrics import METRICS

log = logging.getLogger(__name__)


@dataclass
class StallStats:
    stalls: int = 0
    max_stall_ms: float = 0.0
    last_stack: str = ""


class StallWatch:
    def __init__(self, threshold: float, period: float = 0.005) -> None:
        if threshold <= 0:
            raise ValueError("threshold must be positive")
        self.threshold = threshold
        self.period = period
        self.stats = StallStats()
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._loop_thread = threading.get_ident()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._beat = time.monotonic()
        self._tick(loop)
        self._thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = time.monotonic()
        stalled = now - self._beat - self.period
        if stalled >= self.threshold:
            self.stats.max_stall_ms = max(self.stats.max_stall_ms, round(stalled * 1000, 1))
            METRICS.loop_stalls.observe(stalled)
        self._beat = now
        self._handle = loop.call_later(self.period, self._tick, loop)

    def _watch(self) -> None:
        reported = 0.0
        while not self._stop.wait(self.threshold / 2):
            beat = self._beat
            if time.monotonic() - beat < self.threshold + self.period or beat == reported:
                continue
            reported = beat
            frame = sys._current_frames().get(self._loop_thread)
            stack = "".join(traceback.format_stack(frame)) if frame is not None else "?"
            self.stats.stalls += 1
            self.stats.last_stack = stack
            log.warning("event loop blocked > %.0f ms; it is in:\n%s", self.threshold * 1000,
                        stack)
