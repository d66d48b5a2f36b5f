"""The soak benchmark at a small scale, in-process: 100 connect -> speak -> close cycles at 10
concurrent plus a few clients that vanish without DELETE, and nothing is left behind.

``bench/soak.py`` runs 1,000 cycles and 100 vanishing clients against ``python -m gateway``
and reads the process from outside; here the same cycles (its ``run_cycles``) run against the
in-process gateway, so what is left is read directly: asyncio tasks, threads, UDP sockets, peer
connections (frozen ones included), the closed sessions' fates. Vanished clients stop answering
(nothing they send leaves their socket); the gateway reaps them through ICE consent freshness,
made short here (``aiortc_compat.consent_timing``, test only: aioice's 5 s x 6 checks becomes
0.5 s x 4).
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import time

import pytest
from aiortc import RTCPeerConnection

from bench.soak import Listener, fd_counts, run_cycles
from gateway import aiortc_compat
from gateway.runtime import gc_policy
from gateway.runtime.gc_policy import ClosedWatch
from gateway.runtime.metrics import METRICS
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

CYCLES = 100
CONCURRENCY = 10
VANISH = 5
CONSENT_INTERVAL_S, CONSENT_FAILURES = 0.5, 4  # a vanished peer fails in ≈4 s
SHARED_POOLS = ("opus-", "piper-")  # process-wide worker pools, started lazily: not leaks
REAPED_BY = ("peer connection closed", "peer connection failed")


def fd_counts_self() -> dict[str, int]:
    return fd_counts(os.getpid())


def _closed_by_peer() -> float:
    closed = METRICS.snapshot()["sessions_closed_total"]
    return sum(closed.get(reason, 0.0) for reason in REAPED_BY)


def _open_peer_connections() -> int:
    """Peer connections not closed, frozen ones included (a test may unfreeze for a moment)."""
    gc.unfreeze()
    try:
        gc.collect()
        return sum(1 for o in gc.get_objects()
                   if isinstance(o, RTCPeerConnection) and o.connectionState != "closed")
    finally:
        gc.freeze()


async def _tasks_left(baseline: set[asyncio.Task], timeout: float = 5.0) -> list[str]:
    """Tasks beyond the baseline still pending once closing ones had ``timeout`` to end."""

    def extra() -> set[asyncio.Task]:
        return {t for t in asyncio.all_tasks() if t not in baseline and not t.done()
                and t is not asyncio.current_task()
                and t.get_coro().__qualname__ != "RequestHandler.start"}  # HTTP keep-alive

    if pending := extra():
        await asyncio.wait(pending, timeout=timeout)
    return sorted(t.get_coro().__qualname__ for t in extra())


@pytest.mark.timeout(120)
async def test_soak_cycles_and_vanished_clients_leave_nothing_behind(start_gateway, monkeypatch):
    voices = VoiceRegistry([ToneSynthesizer(name="tone", frequency=440.0, seconds=0.5,
                                            sample_rate=24_000)])
    gateway = await start_gateway(voices, max_sessions=CONCURRENCY + VANISH + 10)
    registry, http = gateway.registry, gateway.http
    watch = ClosedWatch()  # this test's closed sessions only (the default is process-wide)
    monkeypatch.setattr(gc_policy, "CLOSED", watch)
    registry.gc.watch = watch
    registry.gc.live_sessions = registry.__len__  # this gateway's sessions (not other tests')
    started = time.monotonic()
    with aiortc_compat.consent_timing(CONSENT_INTERVAL_S, CONSENT_FAILURES):
        # warm-up: pools, caches and first-use allocations
        warm, _ = await run_cycles(gateway.url, http, 0, CONCURRENCY, CONCURRENCY)
        assert all("error" not in row for row in warm), warm
        await asyncio.sleep(0.5)
        baseline_tasks = set(asyncio.all_tasks())
        baseline_threads = {t.name for t in threading.enumerate()}
        baseline_udp = fd_counts_self()["udp"]
        closed_by_peer = _closed_by_peer()
        freed = watch.freed
        gone: list[Listener] = []
        cycles, vanished = await run_cycles(
            gateway.url, http, CONCURRENCY, CYCLES - CONCURRENCY, CONCURRENCY, vanish=VANISH,
            poll_after_s=0.5, poll_s=0.2, reap_timeout_s=30.0, gone=gone,
        )
        for listener in gone:
            await listener.close(delete=False)  # the client's own side, as the bench does
        del listener, gone
    elapsed = time.monotonic() - started
    errors = [row for row in cycles + vanished if row.get("error")]
    reap_s = sorted(row["reap_s"] for row in vanished if "reap_s" in row)
    print(f"{len(cycles) + len(warm)} cycles + {len(vanished)} vanished in {elapsed:.1f} s; "
          f"reaped after {reap_s} s; errors {errors}")
    assert errors == []
    assert all(row["state"] == "done" and row["speech_packets"] > 0 for row in cycles)
    # every vanished client was reaped by the gateway itself, and counted as such
    assert len(reap_s) == VANISH and reap_s[-1] < 15
    assert _closed_by_peer() - closed_by_peer == VANISH
    assert len(registry) == 0
    # nothing left behind: tasks, threads, UDP sockets, peer connections
    assert await _tasks_left(baseline_tasks) == []
    new_threads = {t.name for t in threading.enumerate()} - baseline_threads
    assert {n for n in new_threads if not n.startswith(SHARED_POOLS)} == set()
    assert fd_counts_self()["udp"] == baseline_udp
    assert _open_peer_connections() == 0
    # every closed session was freed by refcounting (none left for a full collection)
    await asyncio.sleep(gc_policy.CLOSED_GRACE_S + 0.1)
    stats = registry.gc.stats
    assert watch.freed - freed == CYCLES - CONCURRENCY + VANISH
    assert (stats.closed_sessions_garbage, stats.closed_sessions_retained) == (0, 0)
    assert stats.reclaims_live == 0
    assert elapsed < 60

