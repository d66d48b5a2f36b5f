"""A bounded pool of low-priority worker threads for CPU-bound work (synthesis, Opus encoding),
with two priorities.

Embedded TTS (Piper) burns whole cores; the event loop thread paces every stream of the process
and must never wait for a core. So:
- the pool is bounded (``workers`` threads, whatever the number of sessions: jobs queue up);
- its threads run at a lower CPU priority (Linux: per-thread nice), so the kernel hands a core to
  the event loop as soon as it wakes;
- jobs that someone is waiting for (``NOW``: an utterance's first clause, or a clause whose turn
  has come) run before prefetches (``LATER``), FIFO within a priority, so a new utterance does
  not queue behind other sessions' read-ahead. A prefetch can be promoted once it is needed.
Cancelling a job's future before it starts removes it; a running job finishes its step.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
NOW = 0
LATER = 1
DEFAULT_NICE = 10


#: Set by the scale-out supervisor (gateway.cluster) in each of its N worker processes: every
#: process's pools then take its share of the cores, not all of them.
PROCESSES_ENV = "VOICE_GATEWAY_WORKER_PROCESSES"


def processes() -> int:
    """How many gateway processes share this machine's cores (1 unless supervised)."""
    try:
        return max(1, int(os.environ.get(PROCESSES_ENV, "1")))
    except ValueError:
        return 1


def cpu_share() -> int:
    """This process's cores: cpu_count // processes, at least 1."""
    return max(1, (os.cpu_count() or 1) // processes())


def default_workers() -> int:
    """One core is left to the event loop; at least two workers, at most eight (a process of
    several on the machine: its share of the cores less its loop's, at least one)."""
    if processes() > 1:
        return max(1, min(8, cpu_share() - 1))
    return max(2, min(8, (os.cpu_count() or 2) - 1))


class WorkerPool:
    def __init__(
        self, workers: int, nice: int = DEFAULT_NICE, name: str = "synth", idle: bool = False
    ) -> None:
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self.workers = workers
        self.nice = nice
        self.idle = idle  # SCHED_IDLE: runs only on CPU no other thread wants (Linux)
        self.name = name
        self._heap: list[tuple[int, int, Future[Any], Callable[..., Any], tuple[Any, ...]]] = []
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.busy = 0  # jobs running now
        self.peak_busy = 0
        self.completed = 0

    def submit(self, fn: Callable[..., T], *args: Any, priority: int = NOW) -> Future[T]:
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError(f"worker pool {self.name!r} is shut down")
            heapq.heappush(self._heap, (priority, next(self._order), future, fn, args))
            if len(self._threads) < self.workers:
                self._spawn()
            self._cond.notify()
        return future

    async def run(self, fn: Callable[..., T], *args: Any, priority: int = NOW) -> T:
        """Run ``fn(*args)`` on the pool; cancelling the caller drops a job not yet started."""
        return await asyncio.wrap_future(self.submit(fn, *args, priority=priority))

    def promote(self, future: Future[T], fn: Callable[..., T], *args: Any) -> Future[T]:
        """``future`` if it already runs (or ran); else a NOW job replacing it."""
        if future.cancel():
            return self.submit(fn, *args, priority=NOW)
        return future

    @property
    def threads(self) -> int:
        return len(self._threads)

    @property
    def queued(self) -> int:
        with self._cond:
            return sum(1 for item in self._heap if not item[2].cancelled())

    def _spawn(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self.name}-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _lower_priority(self) -> None:
        if self.idle and hasattr(os, "SCHED_IDLE"):
            # threads started from here (CTranslate2's) inherit it
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
                return
        if not sys.platform.startswith("linux") or self.nice <= 0:
            return  # elsewhere setpriority(PRIO_PROCESS, tid) would renice the whole process
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):
            # relative to the thread's niceness (the process's): a gateway started under
            # `nice -n 15` keeps its workers below its loop, not raised to ``self.nice``
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid)
                                                     + self.nice))

    def _work(self) -> None:
        self._lower_priority()
        while True:
            with self._cond:
                while not self._heap and not self._closed:
                    self._cond.wait()
                if not self._heap:
                    return
                _, _, future, fn, args = heapq.heappop(self._heap)
                if not future.set_running_or_notify_cancel():
                    continue
                self.busy += 1
                self.peak_busy = max(self.peak_busy, self.busy)
            try:
                result = fn(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._cond:
                    self.busy -= 1
                    self.completed += 1

    def shutdown(self) -> None:
        """Cancel what has not started; threads end after their current job (not waited for)."""
        with self._cond:
            self._closed = True
            pending, self._heap = self._heap, []
            self._cond.notify_all()
        for _, _, future, _, _ in pending:
            future.cancel()


# Not niced. A niced thread that holds the GIL when the kernel preempts it keeps the event loop
# waiting until it runs again (priority inversion): with the encoder pool at nice 5, a fresh
# utterance's first packet went out 24-41 ms (median) after its frame was queued under 250-500
# streams, against 16 ms at nice 0 (bench/load.py overhead probes; 0-20 ms is the slot wait).
# Encoding is small and bounded (0.3 ms a frame, 50 frames/s per speaking session).
ENCODER_NICE = 0
_ENCODER_POOL: WorkerPool | None = None
_ENCODER_LOCK = threading.Lock()


def encoder_pool() -> WorkerPool:
    """The process-wide pool that runs Opus encoding off the event loop (threads start lazily)."""
    global _ENCODER_POOL
    with _ENCODER_LOCK:
        if _ENCODER_POOL is None:
            _ENCODER_POOL = WorkerPool(cpu_share(), nice=ENCODER_NICE, name="opus")
        return _ENCODER_POOL
