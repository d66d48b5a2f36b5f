"""Keep full garbage collections off the media path, and measure the pauses that remain.

CPython 3.11 has no incremental collector: a full collection walks every tracked object and
stops the event loop -- every stream's pacing -- for as long (70-95 ms at 100 streams; 174 ms
with 44 streams live at the 256th close under churn, when this policy reclaimed every 256
closes). Four things keep it off the media path:

1. **Freeze survivors.** Almost everything a session allocates lives as long as the session,
   so once a session is set up the policy moves what is alive out of the collector's sight
   (``gc.freeze``): later collections scan only what was allocated since. It collects the
   young generations first (``gc.collect(1)``: bounded by their size, not the heap's; at
   start-up, with no session, everything), so short-lived garbage is not frozen.
2. **Young generations stay small**: generation 1 is collected every ``MIDDLE_THRESHOLD``
   (3) generation-0 collections instead of CPython's 10, so neither it nor a freeze walks
   more than ≈2,800 young objects (worst 5.5-7 ms of CPU at 10 under churn, ≈3 ms at 3).
3. **Closed sessions leave no cycles** (``session/teardown.py`` cuts them at close), so
   refcounting frees a closed session at once, frozen or not: frozen garbage stays rare.
   ``watch_closed`` follows a closed session's main objects by weak reference: freed (the
   normal case), garbage (alive past ``CLOSED_GRACE_S``: a cycle teardown missed, freed by the
   next reclaim) or retained (alive even after a reclaim: something holds it -- a leak).
4. **Reclaim (one full collection of the whole heap, frozen part included) only when it stalls
   nobody, or when garbage is large**: once the last session has closed (``idle_delay_s``
   later, off the closing request; a session opening meanwhile cancels it), or, while sessions
   stream, only once the frozen garbage is estimated above ``max_garbage_bytes`` (32 MB):
   closed sessions found garbage at ``SESSION_BYTES`` each, plus the objects frozen since the
   last reclaim times the share of frozen objects the last reclaim found to be garbage
   (``INITIAL_GARBAGE_SHARE`` until one has measured it) at ``OBJECT_BYTES`` each -- garbage
   nobody watches (an HTTP connection or an utterance frozen while alive, dying later in a
   cycle) can only have become frozen at a freeze. ``collect_every`` (closes; 0 = off, the
   default) is the old count-based trigger, kept as an explicit backstop.

Every collection's pause is timed (``gc.callbacks``) per generation, and the worst while
sessions were live on its own (wall time, and its CPU time: on a busy machine wall time also
counts the thread being preempted), reported in /healthz (``GcStats``) and observed in
``METRICS.gc_pauses``. ``gc.get_freeze_count`` walks the whole frozen list (≈15 ns per object,
10 ms at 600k objects): it is read only right after a reclaim, never per session.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.runtime.metrics import METRICS

log = logging.getLogger(__name__)
SLOW_PAUSE_MS = 10.0  # collections longer than this are counted and logged
#: A closed session's objects still alive this long after close are counted as garbage (an
#: HTTP handler may hold a closed session while it answers: that is not garbage).
CLOSED_GRACE_S = 2.0
SESSION_BYTES = 256 * 1024  # what a closed session left as garbage holds (≈130-400 KB)
OBJECT_BYTES = 128  # one unattributed garbage object, with what it holds
#: Of the objects frozen, the share that ends as garbage, until a reclaim has measured it
#: (with teardown: ≈0.3-1 % measured under churn; before it, ≈10 %).
INITIAL_GARBAGE_SHARE = 0.05
MIN_FROZEN_TO_LEARN = 10_000  # a reclaim after fewer frozen objects does not set the share
#: Generation 1 is collected every this many generation-0 collections (CPython: 10). Each
#: generation-0 collection moves up to ≈700 survivors into it, and while sessions are set up
#: most objects survive: at 10 a generation-1 collection (or a freeze's) walks up to ≈7,000
#: young objects. Measured (one process holding 60 sessions and their 60 clients, 40 of them
#: closed and reopened over and over): worst generation-1 collection 5.5-7 ms of CPU at 10,
#: 2.7-3 ms at 3, 1.5-3 ms at 1; the total time spent collecting the same.
MIDDLE_THRESHOLD = 3


@dataclass
class GcStats:
    freezes: int = 0
    reclaims: int = 0
    last_reclaim_ms: float = 0.0
    frozen_objects: int = 0  # as of the last reclaim
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])  # per generation
    max_pause_ms: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    pauses_over_10ms: int = 0
    # -- added with the churn policy --
    max_pause_live_ms: float = 0.0  # the worst pause, any generation, while sessions were live
    max_pause_live_cpu_ms: float = 0.0  # the most CPU a collection took then (wall time also
    # counts the thread being preempted)
    pauses_over_10ms_live: int = 0
    reclaims_live: int = 0  # reclaims that ran while sessions were live (garbage was large)
    last_reclaim_collected: int = 0  # unreachable objects the last reclaim found
    max_freeze_ms: float = 0.0  # the worst freeze, its young collection included
    frozen_added: int = 0  # objects frozen since the last reclaim (some freed since)
    closes_since_reclaim: int = 0
    garbage_per_close: float = 0.0  # unreachable objects per close, as the last reclaim found
    garbage_share: float = INITIAL_GARBAGE_SHARE  # of objects frozen, how many end as garbage
    estimated_garbage_bytes: int = 0  # frozen garbage, as estimated (see the module doc)
    closed_sessions_freed: int = 0  # by refcounting, as they should be
    closed_sessions_garbage: int = 0  # now: alive past the grace, in a cycle, until a reclaim
    closed_sessions_retained: int = 0  # now: alive even after a reclaim (a leak)
    untimed_collections: int = 0  # started so near the recursion limit our hook could not run


class _Closed:
    """One closed session's watched objects (weak references)."""

    __slots__ = ("__weakref__", "alive", "at", "refs", "retained")

    def __init__(self, at: float) -> None:
        self.at = at
        self.alive = 0
        self.retained = False
        self.refs: list[weakref.ref[Any]] = []


class ClosedWatch:
    """Process-wide: what closed sessions left behind (the collector is process-wide too)."""

    def __init__(self, grace_s: float = CLOSED_GRACE_S, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.grace_s = grace_s
        self.clock = clock
        self.freed = 0
        self._open: set[_Closed] = set()  # not freed yet

    def watch(self, objects: Iterable[object]) -> None:
        record = _Closed(self.clock())
        me = weakref.ref(record)

        def gone(_: weakref.ref[Any]) -> None:
            rec = me()
            if rec is None:
                return
            rec.alive -= 1
            if rec.alive == 0:
                self._open.discard(rec)
                self.freed += 1

        for obj in objects:
            try:
                record.refs.append(weakref.ref(obj, gone))
            except TypeError:  # no __weakref__ slot: not watchable
                continue
            record.alive += 1
        if record.alive:
            self._open.add(record)
        else:
            self.freed += 1

    def counts(self) -> tuple[int, int]:
        """(garbage, retained): closed sessions alive past the grace; retained ones survived
        a reclaim."""
        deadline = self.clock() - self.grace_s
        garbage = retained = 0
        for record in list(self._open):  # a collection may free (and drop) one meanwhile
            if record.retained:
                retained += 1
            elif record.at <= deadline:
                garbage += 1
        return garbage, retained

    def reclaimed(self) -> None:
        """A reclaim just ran: whatever of a closed session is still alive is held, not
        garbage."""
        deadline = self.clock() - self.grace_s
        for record in list(self._open):
            if record.at <= deadline:
                record.retained = True


CLOSED = ClosedWatch()


def _tracked_legs() -> int:
    """Live WebRTC legs of the process: the registry tracks each in ``METRICS.send`` from
    set-up to close (a weak set). Used when the policy is not given ``live_sessions``."""
    live = getattr(METRICS.send, "_live", None)
    return len(live) if live is not None else 0


def watch_closed(objects: Iterable[object]) -> None:
    """Follow a closed session's main objects (they should be freed by refcounting now)."""
    CLOSED.watch(objects)


class GcPolicy:
    def __init__(
        self,
        enabled: bool = True,
        collect_every: int = 0,
        max_garbage_bytes: int = 32 * 1024 * 1024,
        idle_delay_s: float = 1.0,
        live_sessions: Callable[[], int] | None = None,
        watch: ClosedWatch | None = None,
        middle_threshold: int | None = MIDDLE_THRESHOLD,
    ) -> None:
        """``live_sessions``: how many sessions stream now (the registry's ``len``); without
        it, the WebRTC legs the process's send metrics track (every registry's, set up and not
        closed yet)."""
        self.enabled = enabled
        self.collect_every = collect_every
        self.max_garbage_bytes = max_garbage_bytes
        self.idle_delay_s = idle_delay_s
        self.watch = watch or CLOSED
        self.live_sessions = live_sessions
        self._started: float | None = None
        self._started_cpu = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._stats = GcStats()
        self._thresholds: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
        if enabled and middle_threshold is not None:
            before = gc.get_threshold()
            gc.set_threshold(before[0], middle_threshold, before[2])
            self._thresholds = (before, gc.get_threshold())
        gc.callbacks.append(self._on_gc)

    def close(self) -> None:
        """Stop timing collections (the policy's owner is going away); thresholds back."""
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._cancel_idle()
        if self._thresholds is not None:
            before, ours = self._thresholds
            if gc.get_threshold() == ours:  # nobody changed them since
                gc.set_threshold(*before)
            self._thresholds = None

    # --- timing ------------------------------------------------------------------------------

    @property
    def stats(self) -> GcStats:
        """The counters, with the closed sessions' fates read now."""
        self.estimate_garbage()
        return self._stats

    @property
    def live(self) -> int:
        """Sessions streaming now (in this process)."""
        if self.live_sessions is not None:
            return self.live_sessions()
        return _tracked_legs()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # A collection can start anywhere, also a few frames below the recursion limit (deeply
        # nested JSON inside json.loads): there even a call raises RecursionError, which the
        # interpreter would print as "Exception ignored in" and lose. That collection goes
        # untimed, counted; its stop is skipped (no start time to measure from).
        try:
            if phase == "start":
                self._started = time.perf_counter()
                self._started_cpu = time.thread_time()
            elif self._started is not None:
                self._record(info)
        except RecursionError:
            self._started = None
            self._stats.untimed_collections += 1

    def _record(self, info: dict[str, Any]) -> None:
        assert self._started is not None
        generation = int(info.get("generation", 0))
        pause_ms = (time.perf_counter() - self._started) * 1000
        cpu_ms = (time.thread_time() - self._started_cpu) * 1000
        stats = self._stats
        stats.collections[generation] += 1
        METRICS.gc_pauses.labels(str(generation)).observe(pause_ms / 1000)
        if pause_ms > stats.max_pause_ms[generation]:
            stats.max_pause_ms[generation] = round(pause_ms, 2)
        live = self.live
        if live > 0:
            if pause_ms > stats.max_pause_live_ms:
                stats.max_pause_live_ms = round(pause_ms, 2)
            if cpu_ms > stats.max_pause_live_cpu_ms:
                stats.max_pause_live_cpu_ms = round(cpu_ms, 2)
        if pause_ms > SLOW_PAUSE_MS:
            stats.pauses_over_10ms += 1
            if live > 0:
                stats.pauses_over_10ms_live += 1
            log.warning("gc generation %d paused the loop %.1f ms (collected %s, uncollectable "
                        "%s, %d sessions live)", generation, pause_ms, info.get("collected"),
                        info.get("uncollectable"), live)

    # --- freezing ----------------------------------------------------------------------------

    def freeze(self) -> None:
        """Call when long-lived state was just built (start-up done, a session set up): what
        is alive leaves the collector's sight; young garbage is collected first."""
        if not self.enabled:
            return
        self._cancel_idle()  # a session opened: not idle
        live = self.live
        started = time.perf_counter()
        # With sessions live, the young generations only (a pause bounded by their size);
        # with none (start-up), everything not frozen yet: nobody to stall.
        gc.collect(1 if live > 0 else 2)
        added = len(gc.get_objects())  # what is frozen now (no collection: a walk, no visits)
        gc.freeze()
        elapsed_ms = (time.perf_counter() - started) * 1000
        stats = self._stats
        stats.freezes += 1
        if live > 0:  # a session's (start-up state is not counted: it stays)
            stats.frozen_added += added
        stats.max_freeze_ms = max(stats.max_freeze_ms, round(elapsed_ms, 2))
        self._reclaim_if_large()

    # --- reclaiming --------------------------------------------------------------------------

    def session_closed(self, remaining: int) -> None:
        if not self.enabled:
            return
        stats = self._stats
        stats.closes_since_reclaim += 1
        if remaining == 0:
            self._reclaim_when_idle()
        elif self.collect_every and stats.closes_since_reclaim >= self.collect_every:
            self.reclaim()
        else:
            self._reclaim_if_large()

    def _reclaim_if_large(self) -> None:
        if self.estimate_garbage() > self.max_garbage_bytes:
            log.warning("frozen garbage estimated at %.1f MB with %d sessions live: reclaiming",
                        self._stats.estimated_garbage_bytes / 2**20, self.live)
            self.reclaim()

    def estimate_garbage(self) -> int:
        """Frozen garbage, in bytes, as estimated now (see the module doc)."""
        stats = self._stats
        garbage, retained = self.watch.counts()
        stats.closed_sessions_garbage, stats.closed_sessions_retained = garbage, retained
        stats.closed_sessions_freed = self.watch.freed
        unattributed = stats.frozen_added * stats.garbage_share
        stats.estimated_garbage_bytes = int(garbage * SESSION_BYTES + unattributed * OBJECT_BYTES)
        return stats.estimated_garbage_bytes

    def _reclaim_when_idle(self) -> None:
        """The last session closed: reclaim once nothing streams, off the closing request."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:  # no loop (unit use): now (outside the except: nothing of it frozen)
            self.reclaim()
            return
        self._cancel_idle()
        self._idle_timer = loop.call_later(self.idle_delay_s, self._idle_reclaim)

    def _idle_reclaim(self) -> None:
        self._idle_timer = None
        if self.live == 0 and self._stats.closes_since_reclaim > 0:
            self.reclaim()

    def _cancel_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def reclaim(self) -> None:
        """One full collection of the whole heap, frozen part included, then freeze again."""
        self._cancel_idle()
        stats = self._stats
        live = self.live
        started = time.perf_counter()
        gc.unfreeze()
        try:
            collected = gc.collect()
        finally:
            gc.freeze()
        stats.last_reclaim_ms = round((time.perf_counter() - started) * 1000, 2)
        stats.reclaims += 1
        if live > 0:
            stats.reclaims_live += 1
        stats.last_reclaim_collected = collected
        if stats.closes_since_reclaim > 0:
            stats.garbage_per_close = round(collected / stats.closes_since_reclaim, 2)
        if stats.frozen_added >= MIN_FROZEN_TO_LEARN:
            stats.garbage_share = round(min(1.0, collected / stats.frozen_added), 4)
        stats.closes_since_reclaim = 0
        self.watch.reclaimed()
        stats.frozen_objects = gc.get_freeze_count()
        stats.frozen_added = 0
        self.estimate_garbage()
