"""Watching the gateway while a test attacks it: the event loop's worst stall, the process's
peak RSS, and the CPU it burns after a request ended (the gateway under test runs in the
test's own process and loop, so these are the gateway's)."""

from __future__ import annotations

import asyncio
import threading
import time
from types import TracebackType

PAGE = 4096


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class LoopStall:
    """``async with LoopStall() as stall``: ``stall.worst_s``, the longest the loop went
    without running a 10 ms timer, measured while the block ran."""

    def __init__(self, period_s: float = 0.01) -> None:
        self.period_s = period_s
        self.worst_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.period_s)
            now = loop.time()
            self.worst_s = max(self.worst_s, now - last - self.period_s)
            last = now

    async def __aenter__(self) -> LoopStall:
        self._task = asyncio.create_task(self._watch())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        await asyncio.sleep(self.period_s * 2)  # a stall at the very end is counted too
        self._task.cancel()


class RssPeak:
    """``with RssPeak() as rss``: ``rss.growth_mb``, the peak RSS over the block minus the RSS
    at its start, sampled every 20 ms from a thread (so a frozen loop is still sampled)."""

    def __init__(self) -> None:
        self.start_mb = self.peak_mb = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_mb = max(self.peak_mb, rss_mb())

    @property
    def growth_mb(self) -> float:
        return self.peak_mb - self.start_mb

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, rss_mb())


async def cpu_seconds_between(start_s: float, end_s: float) -> float:
    """CPU the whole process (every thread) used from ``start_s`` to ``end_s`` from now."""
    await asyncio.sleep(start_s)
    before = time.process_time()
    await asyncio.sleep(end_s - start_s)
    return time.process_time() - before
