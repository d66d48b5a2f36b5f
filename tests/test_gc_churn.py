"""Garbage collection under churn: closing sessions never stalls the ones still streaming.

Real aiortc peers on 127.0.0.1 against the in-process gateway. A closed session must leave no
reference cycle (session/teardown.py: refcounting frees it at once, frozen or not), so the
policy (runtime/gc_policy.py) has nothing to reclaim while sessions stream: no full collection
of the whole heap runs then, every collection that does run walks only young objects (allocated
since the last freeze), and memory stays flat over hundreds of closes. The listeners are light (RTP
counted and dropped before SRTP: bench/soak.py's ``Listener``) so one process carries both
sides.
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any

import pytest

from bench.soak import Listener
from gateway import aiortc_compat
from gateway.runtime import gc_policy
from gateway.runtime.gc_policy import ClosedWatch, GcPolicy
from gateway.runtime.metrics import METRICS

SESSIONS = 60  # open at once
KEPT = 20  # of which these speak through the whole test
ROUNDS = 6  # the other 40 are closed one after another, then reopened, this many times
CONNECT_AT_ONCE = 10
#: The collector's own work (CPU time) per collection while streams are live. Measured here
#: 2.6-8.1 ms (this process holds both sides, the clients' young objects too, and a busy
#: machine's cache misses inflate it), once 12.4 ms in a fresh-clone CI run (2026-12-03, the
#: same on the commit before the session-memory work: 4.4-6.3 ms locally for both); the
#: gateway process alone, under the soak, 2-3 ms. A full collection of this heap takes
#: 150-250 ms: the bound sits between, far from both.
MAX_LIVE_PAUSE_CPU_MS = 25.0


class PauseLog:
    """Every collection's generation, wall and CPU time, and whether sessions were live."""

    def __init__(self, live: Any) -> None:
        self.live = live
        self.pauses: list[tuple[int, float, float, bool]] = []
        self._t = self._cpu = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t, self._cpu = time.perf_counter(), time.thread_time()
            return
        self.pauses.append((
            int(info["generation"]), (time.perf_counter() - self._t) * 1000,
            (time.thread_time() - self._cpu) * 1000, self.live() > 0,
        ))

    def worst_live(self) -> tuple[float, float]:
        live = [(wall, cpu) for _, wall, cpu, is_live in self.pauses if is_live]
        return max((w for w, _ in live), default=0.0), max((c for _, c in live), default=0.0)


async def _open(url: str, http: Any, count: int) -> list[Listener]:
    slots = asyncio.Semaphore(CONNECT_AT_ONCE)

    async def one() -> Listener:
        listener = Listener(url, http)
        async with slots:
            await listener.connect()
        return listener

    return list(await asyncio.gather(*(one() for _ in range(count))))


@pytest.fixture
def lenient_consent():
    """120 peers in one process on a shared 2-core box: when the process is starved of CPU,
    answers to ICE consent checks can miss aioice's 0.5 s six times in a row and a kept
    session would be reaped as gone. This test is about GC pauses: consent never expires."""
    with aiortc_compat.consent_timing(interval_s=5.0, failures=1_000_000):
        yield


@pytest.mark.timeout(240)
@pytest.mark.serial  # the live streams' worst pause in CPU ms
async def test_churn_never_pauses_live_streams_and_memory_stays_flat(start_gateway,
                                                                     lenient_consent,
                                                                     monkeypatch):
    gateway = await start_gateway(max_sessions=SESSIONS + 10)
    registry, http = gateway.registry, gateway.http
    policy = registry.gc
    watch = ClosedWatch()  # this test's closed sessions only (the default is process-wide)
    monkeypatch.setattr(gc_policy, "CLOSED", watch)
    policy.watch = watch
    policy.live_sessions = registry.__len__  # this gateway's sessions (other tests' are not)
    policy.freeze()  # start-up state out of sight, as ``python -m gateway`` does (cli.serve)
    frozen_at_start = gc.get_freeze_count()
    kept: list[Listener] = []
    log = PauseLog(lambda: len(registry))
    gc.callbacks.append(log)
    try:
        listeners = await _open(gateway.url, http, SESSIONS)
        kept, churned = listeners[:KEPT], listeners[KEPT:]
        del listeners
        for listener in kept:
            await listener.client.say("long", voice="long")  # 30 s of speech each
        speech_before = [k.speech_packets for k in kept]
        closes = 0
        frozen_after_round: list[int] = []
        for _round in range(ROUNDS):
            for listener in churned:  # one after another, while the kept ones speak
                await listener.close(delete=True)
                closes += 1
            assert len(registry) == KEPT, METRICS.snapshot()["sessions_closed_total"]
            frozen_after_round.append(gc.get_freeze_count())
            churned = await _open(gateway.url, http, SESSIONS - KEPT)
        for listener in churned:
            await listener.close(delete=True)
            closes += 1
        # every kept stream kept receiving speech all along
        assert all(k.speech_packets > b + 50 for k, b in zip(kept, speech_before))
        await asyncio.sleep(gc_policy.CLOSED_GRACE_S + 0.2)
        stats = policy.stats
        worst_wall, worst_cpu = log.worst_live()
        print(f"{closes} closes, {len(log.pauses)} collections; worst while live: "
              f"{worst_wall:.2f} ms wall, {worst_cpu:.2f} ms CPU; policy: "
              f"max_pause_live_ms={stats.max_pause_live_ms} reclaims_live={stats.reclaims_live} "
              f"max_freeze_ms={stats.max_freeze_ms}; frozen after each round: "
              f"{frozen_after_round}")
        top = [(g, round(w, 1), round(c, 1))
               for g, w, c, _ in sorted((p for p in log.pauses if p[3]), key=lambda p: -p[2])[:8]]
        print("worst live collections (generation, wall ms, CPU ms):", top)
        assert closes >= 256  # past the old count-based trigger (a full collection per 256)
        # no full collection of the whole heap while sessions streamed
        assert stats.reclaims_live == 0
        # Wall time is printed, not asserted: on a shared machine it also counts the thread
        # being preempted (tens of ms at a load of 6 on 2 cores, for 1 ms of collection).
        assert worst_cpu < MAX_LIVE_PAUSE_CPU_MS, top
        assert stats.max_pause_live_cpu_ms < MAX_LIVE_PAUSE_CPU_MS
        # every closed session was freed by refcounting: nothing left for the collector
        assert watch.freed >= closes
        assert (stats.closed_sessions_garbage, stats.closed_sessions_retained) == (0, 0)
        # memory does not grow with closes: the frozen heap stays flat round after round (the
        # first round warms up); before teardown each close left ≈312 objects frozen
        per_close = (frozen_after_round[-1] - frozen_after_round[1]) / ((ROUNDS - 2) * 40)
        assert per_close < 30, frozen_after_round
        for listener in kept:
            await listener.close(delete=True)
        kept = churned = []  # the closed clients go too (this process holds both sides)
        del listener
        assert len(registry) == 0
        await asyncio.sleep(policy.idle_delay_s + 0.5)  # idle: the policy reclaims now
        assert policy.stats.reclaims == 1 and policy.stats.reclaims_live == 0
        print(f"idle reclaim: {policy.stats.last_reclaim_ms} ms, collected "
              f"{policy.stats.last_reclaim_collected}, frozen {frozen_at_start} at start -> "
              f"{policy.stats.frozen_objects}")
        assert policy.stats.frozen_objects - frozen_at_start < 10_000
    finally:
        gc.callbacks.remove(log)
        for listener in kept:
            await listener.close(delete=True)


async def test_a_closed_session_leaves_no_cyclic_garbage(start_gateway):
    """Objects of closed sessions found by the cycle collector (``DEBUG_SAVEALL``): none of
    ours or aiortc's (before teardown: ≈312 per session, the session's whole graph)."""
    gateway = await start_gateway()
    listeners = await _open(gateway.url, gateway.http, 3)  # warm-up: first-use allocations
    for listener in listeners:
        await listener.close()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        gc.garbage.clear()
        listeners = await _open(gateway.url, gateway.http, 8)
        for listener in listeners:
            await listener.client.say("hi", voice="tone")
        await asyncio.sleep(0.3)
        for listener in listeners[:4]:
            await listener.close(delete=True)  # DELETE
        for listener in listeners[4:]:
            await listener.close(delete=False)  # the peer closes: DTLS close_notify
        for _ in range(100):
            if len(gateway.registry) == 0:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # closing tasks finish
        gc.collect()
        found = [o for o in gc.garbage
                 if type(o).__module__.split(".")[0] in ("gateway", "aiortc", "pyee")]
        names = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in found})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert names == []


# --- the policy itself ----------------------------------------------------------------------


class Cycle:
    def __init__(self) -> None:
        self.me = self


class Held:
    pass


def test_freezing_collects_young_garbage_first():
    policy = GcPolicy()
    try:
        garbage = Cycle()
        ref = weakref.ref(garbage)
        del garbage
        policy.freeze()
        assert ref() is None  # collected, not frozen
    finally:
        policy.close()
        gc.unfreeze()


def test_garbage_left_by_closed_sessions_is_reclaimed_while_live_only_when_large():
    now = [0.0]
    watch = ClosedWatch(grace_s=1.0, clock=lambda: now[0])
    live = [5]
    policy = GcPolicy(max_garbage_bytes=int(3.5 * gc_policy.SESSION_BYTES), watch=watch,
                      live_sessions=lambda: live[0])
    leaked: list[Cycle] = []
    try:
        for _ in range(3):
            node = Cycle()  # a closed session teardown missed: kept alive by its own cycle
            watch.watch([node])
            leaked.append(node)
        policy.session_closed(remaining=5)
        assert policy.stats.reclaims == 0  # inside the grace: not counted as garbage yet
        now[0] = 2.0
        assert policy.stats.closed_sessions_garbage == 3
        policy.session_closed(remaining=5)
        assert policy.stats.reclaims == 0  # 3 sessions' worth: not over the bound
        node = Cycle()
        watch.watch([node])
        leaked.append(node)
        now[0] = 4.0
        refs = [weakref.ref(n) for n in leaked]
        del node
        leaked.clear()
        policy.session_closed(remaining=5)
        assert (policy.stats.reclaims, policy.stats.reclaims_live) == (1, 1)
        assert all(r() is None for r in refs)  # the reclaim freed them
        assert policy.stats.closed_sessions_garbage == 0
        assert watch.freed == 4
    finally:
        policy.close()
        gc.unfreeze()


def test_held_closed_sessions_count_as_retained_not_garbage():
    now = [0.0]
    watch = ClosedWatch(grace_s=1.0, clock=lambda: now[0])
    policy = GcPolicy(watch=watch, live_sessions=lambda: 1)
    try:
        held = Held()  # something still references it: a leak, not garbage
        watch.watch([held])
        now[0] = 2.0
        assert policy.stats.closed_sessions_garbage == 1  # (until a reclaim tells)
        policy.reclaim()
        assert (policy.stats.closed_sessions_garbage, policy.stats.closed_sessions_retained) == (
            0, 1)
        del held  # refcounting frees it (no cycle): the watch sees it go
        assert policy.stats.closed_sessions_retained == 0 and watch.freed == 1
    finally:
        policy.close()
        gc.unfreeze()


async def test_idle_reclaim_waits_and_a_new_session_cancels_it():
    live = [0]
    policy = GcPolicy(idle_delay_s=0.05, live_sessions=lambda: live[0], watch=ClosedWatch())
    try:
        policy.session_closed(remaining=0)
        assert policy.stats.reclaims == 0  # not on the closing request: deferred
        policy.freeze()  # a session opened meanwhile: no longer idle
        await asyncio.sleep(0.1)
        assert policy.stats.reclaims == 0
        policy.session_closed(remaining=0)
        await asyncio.sleep(0.1)
        assert policy.stats.reclaims == 1 and policy.stats.reclaims_live == 0
    finally:
        policy.close()
        gc.unfreeze()
