"""Scale-out: streams carried by N worker processes (``--workers N``) against one, on the same
ladder, and connect time through the public port against a worker directly.

For each worker count and each rung of the ladder a fresh gateway starts (``--workers 1`` is
the plain single process; more is the supervisor and its workers), every worker loading one
persisted phrase cache (warmed once, as ``bench.load`` does), so every utterance is a cache
hit and only the media path is measured. The load generator (``bench.loadgen``'s sessions,
run in this process) connects the rung's N WebRTC sessions **through the public port**, asks
every one to speak, and measures a speaking window: on-time share and lateness from kernel
receive timestamps, loss from sequence numbers, and each process's CPU from /proc.

What scales is per-worker CPU per packet: a worker's event loop carries its own streams on its
own core, so N workers carry N times the streams when there are N free cores. **On this 2-core
VM the load generator shares the cores with the workers** (and with the supervisor, which is
idle once sessions are placed), so total streams carried cannot double here: the table reports
each worker's CPU and µs per packet, the generator's CPU and each core's busy share, so the
limit can be read for what it is.

The connect probe (idle server, sequential): ``POST /v1/sessions`` to 201 and the whole
connect (offer -> DTLS connected) through the public port (proxied by the supervisor) against
straight to a worker's own port.

    python -m bench.cluster [--workers 2] [--ladder 50,100,200,300] [--window 8] [--quick]

Results: bench/results/cluster.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from bench import procstats
from bench.common import RESULTS, free_port, machine
from bench.load import spawn_server, stop, tail, tone_wav, warm_phrase_cache
from bench.loadgen import (
    LONG_TEXT,
    ON_TIME_S,
    LoadSession,
    bounded,
    recorded_window,
    wait_speaking,
    window_summary,
)
from gateway import aiortc_compat

DEFAULT_LADDER = "50,100,200,300,400"
QUICK_LADDER = "20,60"


class ClusterSession(LoadSession):
    """``bench.loadgen``'s session; the Location it is given is absolute (the worker's)."""

    async def _connect(self) -> None:
        await super()._connect()
        url = self.session_url or ""
        rest = url[len(self.base_url):] if url.startswith(self.base_url) else url
        if rest.startswith("http"):
            self.session_url = rest

    @property
    def worker_port(self) -> int | None:
        if self.session_url is None:
            return None
        from yarl import URL

        return URL(self.session_url).port


def free_range(count: int) -> int:
    """A base port with ``count`` free ports from it (the public port, then the workers')."""
    import socket

    for _ in range(100):
        base = free_port()
        if base + count > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def gateway_cmd(port: int, workers: int, sessions: int, wav: Path, cache: Path) -> list[str]:
    return [sys.executable, "-m", "gateway", "--port", str(port), "--workers", str(workers),
            "--ice-hosts", "127.0.0.1", "--log-level", "WARNING",
            "--max-sessions", str(sessions + 50), "--connect-timeout", "120",
            "--voice", f"bench=wav:{wav}", "--phrase-cache-dir", str(cache)]


async def wait_workers(url: str, proc: subprocess.Popen[bytes], log: Path, workers: int,
                       timeout: float = 90.0) -> list[dict[str, Any]]:
    """Until /healthz answers and (with workers) every worker serves; the workers' entries."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"gateway exited ({proc.returncode}): {tail(log)}")
            with contextlib.suppress(aiohttp.ClientError, ValueError):
                async with http.get(f"{url}/healthz") as r:
                    body = await r.json()
                    if workers == 1 and r.status == 200:
                        return [{"pid": proc.pid, "url": url, "name": "w0"}]
                    ws = body.get("workers") or []
                    if len(ws) == workers and all(w["state"] == "serving" for w in ws):
                        return ws
            await asyncio.sleep(0.2)
    raise TimeoutError(f"gateway not ready: {tail(log)}")


async def connect_probe(url: str, http: aiohttp.ClientSession, n: int) -> dict[str, Any]:
    """``n`` sequential connects to ``url``: POST -> 201 ms and offer -> connected ms."""
    post_ms: list[float] = []
    connect_ms: list[float] = []
    for _ in range(n):
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        pc.addTransceiver("audio", direction="recvonly")
        connected = asyncio.get_running_loop().create_future()

        @pc.on("connectionstatechange")
        def on_state(pc: RTCPeerConnection = pc, done: asyncio.Future[bool] = connected) -> None:
            if pc.connectionState == "connected" and not done.done():
                done.set_result(True)

        location = None
        try:
            await pc.setLocalDescription(await pc.createOffer())
            t0 = time.monotonic()
            async with http.post(f"{url}/v1/sessions", data=pc.localDescription.sdp,
                                 headers={"Content-Type": "application/sdp"}) as r:
                answer = await r.text()
                if r.status != 201:
                    raise RuntimeError(f"HTTP {r.status}: {answer[:100]}")
                location = r.headers["Location"]
            t1 = time.monotonic()
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
            await asyncio.wait_for(connected, 20)
            post_ms.append((t1 - t0) * 1000)
            connect_ms.append((time.monotonic() - t0) * 1000)
        finally:
            if location is not None:
                target = location if location.startswith("http") else url + location
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.delete(target) as r:
                        await r.read()
            await pc.close()

    def stats(v: list[float]) -> dict[str, Any]:
        return {"n": len(v), "median": round(float(np.median(v)), 2) if v else None,
                "p90": round(float(np.percentile(v, 90)), 2) if v else None}

    return {"post_to_201_ms": stats(post_ms), "connect_ms": stats(connect_ms)}


async def measure(sessions: list[ClusterSession], pids: dict[str, int], seconds: float,
                  ports: dict[int, str]) -> dict[str, Any]:
    window = await recorded_window(sessions, list(pids.values()), seconds)
    t0, t1, rt_minus_mono = window.t0, window.t1, window.rt_minus_mono
    before = {name: window.before[pid] for name, pid in pids.items()}
    after = {name: window.after[pid] for name, pid in pids.items()}
    out = window.summary
    out["seconds"] = round(t1 - t0, 3)
    out["loadgen_cpu_pct"] = window.loadgen_cpu_pct
    out["core_busy_pct"] = window.core_busy_pct
    per_worker: dict[str, Any] = {}
    for name in pids:
        mine = [s for s in sessions if ports.get(s.worker_port or -1) == name]
        cpu_s = after[name].cpu_s - before[name].cpu_s
        entry: dict[str, Any] = {"cpu_pct": round(procstats.cpu_percent(before[name],
                                                                        after[name]), 1)}
        if mine:
            w = window_summary(mine, t1 - t0, rt_minus_mono)
            sent = w.get("packets_sent_est") or 0
            entry.update(streams=len(mine), packets=sent,
                         us_per_packet=round(cpu_s * 1e6 / sent, 1) if sent else None,
                         on_time_share=w.get("on_time_share"))
        per_worker[name] = entry
    out["per_process"] = per_worker
    ours = sum(p["cpu_pct"] for p in per_worker.values()) + out["loadgen_cpu_pct"]
    # what other processes on this (shared) machine took meanwhile
    out["others_cpu_pct"] = round(max(0.0, sum(out["core_busy_pct"].values()) - ours), 1)
    worker_cpu = sum(after[n].cpu_s - before[n].cpu_s for n in pids if n != "supervisor")
    sent = out.get("packets_sent_est") or 0
    out["workers_us_per_packet"] = round(worker_cpu * 1e6 / sent, 1) if sent else None
    return out


async def run_rung(workers: int, n: int, args: argparse.Namespace, wav: Path, cache: Path,
                   tmp: Path) -> dict[str, Any]:
    port = free_range(workers + 1)
    url = f"http://127.0.0.1:{port}"
    log = tmp / f"w{workers}-n{n}.log"
    rung: dict[str, Any] = {"workers": workers, "n": n}
    server = spawn_server(gateway_cmd(port, workers, n, wav, cache), log)
    try:
        entries = await wait_workers(url, server, log, workers)
        pids = {e["name"]: int(e["pid"]) for e in entries}
        ports = {int(e["url"].rsplit(":", 1)[1]): e["name"] for e in entries}
        if workers > 1:
            pids["supervisor"] = server.pid
        else:
            ports = {port: "w0"}
        timeout = aiohttp.ClientTimeout(total=120)
        connector = aiohttp.TCPConnector(limit=max(args.batch, 50))
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            sessions = [ClusterSession(i, url, http, full=False) for i in range(n)]
            try:
                t = time.monotonic()
                oks = await bounded(sessions, lambda s: s.connect(60), args.batch)
                live = [s for s, ok in zip(sessions, oks, strict=True) if ok is True]
                times = [s.connect_ms for s in live if s.connect_ms is not None]
                rung["connect"] = {
                    "ok": len(live), "failed": n - len(live),
                    "errors": sorted({s.error or "?" for s in sessions if s.connect_ms is None
                                      })[:3],
                    "phase_s": round(time.monotonic() - t, 2),
                    "ms_p50": round(float(np.median(times)), 1) if times else None,
                    "ms_p95": round(float(np.percentile(times, 95)), 1) if times else None,
                }
                spread: dict[str, int] = {}
                for s in live:
                    name = ports.get(s.worker_port or -1, "?")
                    spread[name] = spread.get(name, 0) + 1
                rung["streams_per_worker"] = spread
                if not live:
                    return rung
                utterances = max(1, min(30, int((args.window + 15) / args.phrase_s) + 1))

                async def speak(s: ClusterSession) -> None:
                    for _ in range(utterances):
                        await s.speak(LONG_TEXT)

                replies = await bounded(live, speak, 50)
                rung["speech_failed"] = sum(isinstance(r, BaseException) for r in replies)
                await wait_speaking(live, 10, 30)
                await asyncio.sleep(1.0)
                rung["speaking"] = await measure(live, pids, args.window, ports)
            finally:
                await bounded(sessions, lambda s: s.close(), 50)
        if server.poll() is not None:
            rung["error"] = f"gateway died: {tail(log)}"
    except Exception as exc:
        rung["error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        stop(server, grace=40)
    rung["held"] = held(rung, args.min_on_time)
    return rung


def held(rung: dict[str, Any], min_on_time: float) -> bool:
    w = rung.get("speaking") or {}
    return (not rung.get("error") and not (rung.get("connect") or {}).get("failed")
            and not rung.get("speech_failed") and bool(w.get("sessions_measured"))
            and not w.get("sessions_without_packets")
            and w.get("on_time_share", 0) >= min_on_time)


async def probe(args: argparse.Namespace, wav: Path, cache: Path, tmp: Path) -> dict[str, Any]:
    """Connect time through the public port against a worker's own port, idle."""
    port = free_range(args.workers + 1)
    url = f"http://127.0.0.1:{port}"
    log = tmp / "probe.log"
    server = spawn_server(gateway_cmd(port, args.workers, 10, wav, cache), log)
    try:
        entries = await wait_workers(url, server, log, args.workers)
        async with aiohttp.ClientSession() as http:
            await connect_probe(url, http, 2)  # warm both paths' connections
            public = await connect_probe(url, http, args.probe)
            direct = await connect_probe(entries[0]["url"], http, args.probe)
        return {"public_port": public, "worker_direct": direct}
    finally:
        stop(server, grace=40)


def row(r: dict[str, Any]) -> str:
    w = r.get("speaking") or {}
    late = w.get("lateness_ms") or {}
    per = w.get("per_process") or {}
    workers = [f"{name}:{p.get('cpu_pct', 0):.0f}%/{p.get('us_per_packet') or 0:.0f}µs"
               for name, p in sorted(per.items()) if name != "supervisor"]
    sup = per.get("supervisor", {}).get("cpu_pct")
    cores = "/".join(f"{v:.0f}" for _, v in sorted((w.get("core_busy_pct") or {}).items()))
    others = w.get("others_cpu_pct")

    def f(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, int | float) else "-"

    status = "ok" if r.get("held") else "BROKE " + str(r.get("error", ""))[:60]
    return (f"{r['workers']:>3} {r['n']:>5} "
            f"{f(100 * w['on_time_share'] if 'on_time_share' in w else None, '7.2f')} "
            f"{f(late.get('p99'), '7.1f')} {f(w.get('packets_lost'), '5d')} "
            f"{f(w.get('workers_us_per_packet'), '7.1f')} {f(sup, '5.1f')} "
            f"{f(w.get('loadgen_cpu_pct'), '5.1f')} {cores:>9} {f(others, '5.0f')} "
            f"{f((r.get('connect') or {}).get('ms_p50'), '6.0f')}  "
            f"{' '.join(workers)}  {status}")


HEADER = (f"{'W':>3} {'N':>5} {'ontime%':>7} {'p99 ms':>7} {'lost':>5} {'µs/pkt':>7} "
          f"{'sup%':>5} {'gen%':>5} {'cores%':>9} {'oth%':>5} {'conn50':>6}  "
          "per worker (CPU %/µs per packet)")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    ladder = [int(x) for x in args.ladder.split(",") if x.strip()]
    counts = [1, args.workers]
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmpdir:
        tmp = Path(tmpdir)
        wav = tone_wav(tmp / "phrase.wav", args.phrase_s)
        cache = tmp / "phrases"
        warm = await warm_phrase_cache(cache, wav, args, tmp)
        results: dict[str, list[dict[str, Any]]] = {str(w): [] for w in counts}
        for n in ladder:
            for w in counts:
                if results[str(w)] and not results[str(w)][-1]["held"] and not args.keep_going:
                    continue  # this worker count already broke at a lower rung
                rung = await run_rung(w, n, args, wav, cache, tmp)
                results[str(w)].append(rung)
                print(row(rung), flush=True)
        connect = await probe(args, wav, cache, tmp)
    summary = {}
    for w, rungs in results.items():
        ok = [r["n"] for r in rungs if r["held"]]
        us = [r["speaking"]["workers_us_per_packet"] for r in rungs
              if r.get("held") and r.get("speaking", {}).get("workers_us_per_packet")]
        summary[w] = {"max_n_held": max(ok) if ok else None,
                      "broke_at": next((r["n"] for r in rungs if not r["held"]), None),
                      "workers_us_per_packet": us}
    return {"settings": {"ladder": ladder, "workers": counts, "window_s": args.window,
                         "phrase_s": args.phrase_s, "min_on_time": args.min_on_time,
                         "on_time_ms": ON_TIME_S * 1000, "phrase_cache_warm": warm,
                         "loadgen": "in this process, unpinned, sharing the cores"},
            "results": results, "summary": summary, "connect_probe": connect}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="compared against 1")
    parser.add_argument("--ladder", default=DEFAULT_LADDER, help="comma-separated N values")
    parser.add_argument("--window", type=float, default=8.0, help="speaking window, s")
    parser.add_argument("--batch", type=int, default=20, help="sessions connected at a time")
    parser.add_argument("--phrase-s", type=float, default=15.0)
    parser.add_argument("--min-on-time", type=float, default=0.90)
    parser.add_argument("--probe", type=int, default=20, help="connects per connect probe")
    parser.add_argument("--keep-going", action="store_true",
                        help="measure every rung even after one broke (CPU per packet at every "
                        "N, for the comparison across worker counts)")
    parser.add_argument("--quick", action="store_true",
                        help=f"ladder {QUICK_LADDER}, 4 s windows, 8 probe connects")
    parser.add_argument("--out", default=str(RESULTS / "cluster.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.ladder, args.window, args.probe, args.phrase_s = QUICK_LADDER, 4.0, 8, 8.0
    if args.workers < 2:
        parser.error("--workers: at least 2 (compared against 1)")
    started = time.monotonic()
    print(HEADER, flush=True)
    data = asyncio.run(main_async(args))
    data = {"benchmark": "cluster", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine(), "seconds": round(time.monotonic() - started, 1), **data}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))
    for w, s in data["summary"].items():
        print(f"{w} worker(s): held up to N={s['max_n_held']}, broke at N={s['broke_at']}; "
              f"workers' µs per packet by rung {s['workers_us_per_packet']}")
    c = data["connect_probe"]
    for name in ("public_port", "worker_direct"):
        print(f"connect via {name}: POST->201 median {c[name]['post_to_201_ms']['median']} ms, "
              f"offer->connected median {c[name]['connect_ms']['median']} ms")
    print(f"written {out}")
    return data


if __name__ == "__main__":
    main()
    sys.exit(0)

