"""One channel's WHEP listeners spread over two workers (a supervisor, a real ``redis-server``),
against per-session streams on the same two workers, in one run (``bench.channels``'s
``workers`` transport).

The channel lives on worker 0; half the listeners join it there, half on worker 1, which hears
it through its mirror (one link). The listeners are ``bench.loadgen``'s header-only WHEP peers,
run in this process (the load generator: its CPU is reported, it shares the two cores with the
workers); on time = within 5 ms by kernel receive stamps. The baseline: ``min(N, cap)``
sessions, each saying the same thing (its own encoder), spread over the same two workers; CPU
per stream is the workers' CPU over the streams either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import procstats
from bench.cluster import ClusterSession, free_range, wait_workers
from bench.common import free_port, stop
from bench.load import tail
from bench.loadgen import bounded, recorded_window, wait_speaking
from gateway import aiortc_compat

REPO = Path(__file__).resolve().parent.parent
VOICE = "tone:440?seconds=120"  # one utterance outlasts every window
TEXT = "a long broadcast"


@contextlib.asynccontextmanager
async def two_workers(n: int, tmp: Path, name: str) -> AsyncIterator[tuple[list[str], list[int]]]:
    """A supervisor with two workers sharing a fresh redis-server: the workers' URLs, pids."""
    redis_port, port = free_port(), free_range(3)
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp / f"{name}.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), "--workers", "2",
             "--ice-hosts", "127.0.0.1", "--log-level", "WARNING", "--voice", VOICE,
             "--redis-url", f"redis://127.0.0.1:{redis_port}/0",
             "--max-sessions", str(n + 50), "--connect-timeout", "120",
             "--channel-max-listeners", str(max(1000, n + 50))],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        workers = sorted(await wait_workers(f"http://127.0.0.1:{port}", server, log, 2),
                         key=lambda w: w["name"])
        yield [w["url"] for w in workers], [int(w["pid"]) for w in workers]
    except Exception as exc:
        raise RuntimeError(f"{type(exc).__name__}: {exc}; log: {tail(log, 400)}") from exc
    finally:
        stop(server, 40)
        redis.kill()
        redis.wait(10)


async def workers_mode(n: int, window: float, tmp: Path, channel: bool, cap: int = 100,
                       connect_timeout: float = 120.0) -> dict[str, Any]:
    """``n`` listeners of one channel (``channel``) or ``min(n, cap)`` sessions, over two
    workers: the workers' CPU, on time, the load generator's CPU."""
    count = n if channel else min(n, cap)
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    try:
        async with two_workers(count, tmp, f"workers-{channel}-{n}") as (urls, pids):
            timeout = aiohttp.ClientTimeout(total=120)
            connector = aiohttp.TCPConnector(limit=100)
            async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
                path = "/v1/channels/bench/whep" if channel else "/v1/sessions"
                if channel:
                    async with http.post(f"{urls[0]}/v1/channels",
                                         json={"name": "bench"}) as r:
                        assert r.status == 201, await r.text()
                sessions = [ClusterSession(i, urls[i % 2], http, full=False, offer_path=path)
                            for i in range(count)]
                try:
                    oks = await bounded(sessions, lambda s: s.connect(connect_timeout), 20)
                    live = [s for s, ok in zip(sessions, oks, strict=True) if ok is True]
                    if not live:
                        return {"error": f"no peer connected: {sessions[0].error}"}
                    await asyncio.sleep(1.0)
                    if channel:
                        async with http.post(f"{urls[0]}/v1/channels/bench/speech",
                                             json={"text": TEXT}) as r:
                            assert r.status == 202, await r.text()
                    else:
                        await bounded(live, lambda s: s.speak(TEXT), 50)
                    await wait_speaking(live, 10, 60)
                    await asyncio.sleep(1.0)
                    w = await recorded_window(live, pids, window)
                    per_worker = [w.cpu_s(pid) / (w.t1 - w.t0) * 100 for pid in pids]
                    s = w.summary
                    cpu = sum(per_worker)
                    return {
                        "streams": count, "connected": len(live),
                        "listeners_per_worker": [sum(1 for x in live if x.base_url == u)
                                                 for u in urls],
                        "server_cpu_pct": round(cpu, 1),
                        "worker_cpu_pct": [round(x, 1) for x in per_worker],
                        "cpu_pct_per_stream": round(cpu / len(live), 4),
                        "on_time_share": s.get("on_time_share"),
                        "on_time_share_worst": s.get("on_time_share_worst_session"),
                        "lateness_p99_ms": (s.get("lateness_ms") or {}).get("p99"),
                        "loss_share": s.get("loss_share"),
                        "sessions_without_packets": s.get("sessions_without_packets"),
                        "loadgen_cpu_pct": w.loadgen_cpu_pct,
                        "core_busy_pct": w.core_busy_pct,
                        "loadavg": procstats.load_average(),
                    }
                finally:
                    await bounded(sessions, lambda s: s.close(), 50)
    except Exception as exc:  # a failed mode is reported, the others still run
        return {"error": f"{type(exc).__name__}: {exc}"[:600]}
