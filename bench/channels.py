"""Broadcast channels against per-session streams, at the same listener count, in one run.

For each count N: a fresh gateway (pinned to ``--server-cpu``) serves N listeners of ONE
channel, then (another fresh gateway) N sessions each saying the same thing -- the
per-listener-encode baseline -- over WHEP (``bench.loadgen``, pinned to ``--loadgen-cpu``,
header-only listeners timed from kernel receive stamps) and over HTTP live (N readers of
``/v1/channels/{name}/listen?format=frames`` against N ``POST /v1/speech/stream`` live
streams, read in this process). Reported per mode: the server's CPU % and CPU per listener,
the ratio channel / sessions (target <= 0.8), on-time share (WHEP, within 5 ms; target >= 99.5 %),
the HTTP readers' frames per second and longest gap, and the load generator's own CPU.

``workers`` (a transport): the issue's case -- N WHEP listeners of one channel over two workers
(a supervisor, a real ``redis-server``; half on the channel's worker, half on the other through
its mirror) against ``min(N, --session-cap)`` sessions over the same two workers
(bench/channel_workers.py); CPU per listener is the two workers' CPU over the listeners.

``--relay N``: a supervisor with two workers and a real ``redis-server``; the channel lives on
worker 0, N HTTP listeners on each worker: worker 1 hears it through its mirror (one link).
Reported: each worker's CPU with its N listeners, and worker 1's with the link alone (its
floor, measured first) -- the relay's CPU per worker.

    python -m bench.channels --listeners 100,250,500     # workers, whep, http
    python -m bench.channels --listeners 500 --transports workers
    python -m bench.channels --listeners 0 --relay 100
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench import procstats
from bench.channel_workers import workers_mode
from bench.cluster import free_range, wait_workers
from bench.common import free_port, stop, wait_healthy, write_results
from bench.load import pinned, tail
from gateway.http.frame_records import FrameRecord, FrameRecordParser

REPO = Path(__file__).resolve().parent.parent
VOICE = "tone:440?seconds=120"  # one utterance outlasts every window
TARGET_RATIO = 0.8
TARGET_ON_TIME = 0.995


def _server(port: int, n: int, cpu: int, log: Path) -> subprocess.Popen[Any]:
    cmd = [sys.executable, "-m", "gateway", "--port", str(port), "--ice-hosts", "127.0.0.1",
           "--log-level", "WARNING", "--max-sessions", str(n + 50), "--connect-timeout", "120",
           "--channel-max-listeners", str(max(1000, n + 50)), "--voice", VOICE]
    out = log.open("w")
    return subprocess.Popen(pinned(cmd, cpu), stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


async def _with_server(n: int, args: argparse.Namespace, tmp: Path, name: str, body: Any
                       ) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / f"{name}-{n}.log"
    server = _server(port, n, args.server_cpu, log)
    try:
        await wait_healthy(url, server, lambda: tail(log), 60)
        return await body(url, server.pid)
    except Exception as exc:  # a failed mode is reported, the others still run
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "log": tail(log, 600)}
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


async def whep_mode(n: int, args: argparse.Namespace, tmp: Path, channel: bool
                    ) -> dict[str, Any]:
    async def body(url: str, pid: int) -> dict[str, Any]:
        out = tmp / f"whep-{channel}-{n}.json"
        cmd = [sys.executable, "-m", "bench.loadgen", "--url", url, "--server-pid", str(pid),
               "--sessions", str(n), "--full", "0", "--batch", "20", "--window",
               str(args.window), "--silent-window", "0", "--out", str(out), "--text",
               "a long broadcast", "--connect-timeout", "120"]
        if channel:
            cmd += ["--channel", "bench"]
        gen = await asyncio.create_subprocess_exec(
            *pinned(cmd, args.loadgen_cpu), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        output, _ = await asyncio.wait_for(gen.communicate(), 600)
        if gen.returncode != 0 or not out.exists():
            return {"error": output.decode(errors="replace")[-1500:]}
        result = json.loads(out.read_text())
        w = result.get("speaking") or {}
        return {"connected": result["connect"]["ok"], "server_cpu_pct": w.get("server_cpu_pct"),
                "on_time_share": w.get("on_time_share"),
                "on_time_share_worst": w.get("on_time_share_worst_session"),
                "lateness_p99_ms": (w.get("lateness_ms") or {}).get("p99"),
                "loss_share": w.get("loss_share"), "loadgen_cpu_pct": w.get("loadgen_cpu_pct"),
                "server_rss_kb": w.get("server_rss_kb"), "loadavg": w.get("loadavg")}

    return await _with_server(n, args, tmp, f"whep-{'channel' if channel else 'sessions'}",
                              body)


class _Reader:
    def __init__(self) -> None:
        self.frames = 0
        self.times: list[float] = []

    async def read(self, response: aiohttp.ClientResponse) -> None:
        parser = FrameRecordParser()
        async for chunk in response.content.iter_any():
            got = sum(isinstance(r, FrameRecord) for r in parser.feed(chunk))
            if got:
                self.frames += got
                self.times.append(time.monotonic())

    def window(self, t0: float, t1: float) -> tuple[int, float]:
        times = [t for t in self.times if t0 <= t <= t1]
        gap = max((b - a for a, b in itertools.pairwise(times)), default=t1 - t0)
        return len(times), gap


async def http_mode(n: int, args: argparse.Namespace, tmp: Path, channel: bool
                    ) -> dict[str, Any]:
    async def body(url: str, pid: int) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            readers = [_Reader() for _ in range(n)]
            tasks: list[asyncio.Task[None]] = []

            async def one(reader: _Reader) -> None:
                if channel:
                    request = http.get(f"{url}/v1/channels/bench/listen?format=frames")
                else:
                    request = http.post(f"{url}/v1/speech/stream",
                                        json={"text": "a long stream", "pace": "live"})
                async with request as response:
                    assert response.status == 200, await response.text()
                    await reader.read(response)

            if channel:
                async with http.post(f"{url}/v1/channels", json={"name": "bench"}) as r:
                    assert r.status == 201, await r.text()
            tasks = [asyncio.ensure_future(one(r)) for r in readers]
            if channel:
                await asyncio.sleep(1.0)
                async with http.post(f"{url}/v1/channels/bench/speech",
                                     json={"text": "a long broadcast"}) as r:
                    assert r.status == 202
            await asyncio.sleep(3.0)  # every stream started and settled
            me = os.getpid()
            srv0, gen0 = procstats.cpu_sample(pid), procstats.cpu_sample(me)
            t0 = time.monotonic()
            await asyncio.sleep(args.window)
            t1 = time.monotonic()
            srv1, gen1 = procstats.cpu_sample(pid), procstats.cpu_sample(me)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        writes, gaps = zip(*(r.window(t0, t1) for r in readers), strict=True)
        seconds = t1 - t0
        return {"server_cpu_pct": round(procstats.cpu_percent(srv0, srv1), 1),
                "loadgen_cpu_pct": round(procstats.cpu_percent(gen0, gen1), 1),
                "loadavg": procstats.load_average(),
                "reads_per_s_per_listener": round(sum(writes) / n / seconds, 1),
                "max_gap_ms": round(max(gaps) * 1000, 1),
                "listeners_with_frames": sum(1 for r in readers if r.frames)}

    return await _with_server(n, args, tmp, f"http-{'channel' if channel else 'sessions'}",
                              body)


def _ratio(channel: dict[str, Any], sessions: dict[str, Any]) -> float | None:
    key = "cpu_pct_per_stream" if "cpu_pct_per_stream" in sessions else "server_cpu_pct"
    a, b = channel.get(key), sessions.get(key)
    return round(a / b, 3) if a is not None and b else None


async def _reader_task(http: aiohttp.ClientSession, url: str, reader: _Reader) -> None:
    async with http.get(f"{url}/v1/channels/bench/listen?format=frames") as response:
        assert response.status == 200, await response.text()
        await reader.read(response)


async def relay_mode(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    redis_port, port = free_port(), free_range(3)
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp / "relay.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), "--workers", "2",
             "--ice-hosts", "127.0.0.1", "--log-level", "WARNING", "--voice", VOICE,
             "--redis-url", f"redis://127.0.0.1:{redis_port}/0",
             "--channel-max-listeners", str(max(1000, n + 50))],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        workers = sorted(await wait_workers(f"http://127.0.0.1:{port}", server, log, 2),
                         key=lambda w: w["name"])
        urls, pids = [w["url"] for w in workers], [int(w["pid"]) for w in workers]
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        async with aiohttp.ClientSession(timeout=timeout,
                                         connector=aiohttp.TCPConnector(limit=0)) as http:
            async with http.post(f"{urls[0]}/v1/channels", json={"name": "bench"}) as r:
                assert r.status == 201, await r.text()
            async with http.post(f"{urls[0]}/v1/channels/bench/speech",
                                 json={"text": "a long broadcast"}) as r:
                assert r.status == 202

            async def window() -> list[float]:
                before = [procstats.cpu_sample(pid) for pid in pids]
                await asyncio.sleep(args.window)
                return [round(procstats.cpu_percent(b, procstats.cpu_sample(pid)), 1)
                        for b, pid in zip(before, pids, strict=True)]

            first = _Reader()  # one listener on worker 1: its mirror and link exist
            tasks = [asyncio.ensure_future(_reader_task(http, urls[1], first))]
            await asyncio.sleep(2.0)
            floor = await window()
            readers = [[_Reader() for _ in range(n)] for _ in urls]
            for url, group in zip(urls, readers, strict=True):
                tasks += [asyncio.ensure_future(_reader_task(http, url, r)) for r in group]
            await asyncio.sleep(3.0)
            t0 = time.monotonic()
            loaded = await window()
            t1 = time.monotonic()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        gaps = [[r.window(t0, t1)[1] for r in group] for group in readers]
        return {"listeners_per_worker": n,
                "origin_cpu_pct": loaded[0], "mirror_cpu_pct": loaded[1],
                "mirror_cpu_pct_link_only": floor[1], "origin_cpu_pct_one_link": floor[0],
                "origin_cpu_pct_per_listener": round(loaded[0] / n, 3) if n else None,
                "mirror_cpu_pct_per_listener": round((loaded[1] - floor[1]) / n, 3)
                if n else None,
                "max_gap_ms": [round(max(g) * 1000, 1) for g in gaps]}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300], "log": tail(log, 600)}
    finally:
        stop(server, 40)
        redis.kill()
        redis.wait(10)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    relay: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        if args.relay:
            relay = await relay_mode(args.relay, args, tmp)
        for n in [n for n in args.listeners if n > 0]:
            row: dict[str, Any] = {"listeners": n}
            for transport in args.transports:
                if transport == "workers":
                    chan = await workers_mode(n, args.window, tmp, True, args.session_cap)
                    sess = await workers_mode(n, args.window, tmp, False, args.session_cap)
                else:
                    mode = whep_mode if transport == "whep" else http_mode
                    chan = await mode(n, args, tmp, channel=True)
                    sess = await mode(n, args, tmp, channel=False)
                chan["loadavg"] = chan.get("loadavg") or procstats.load_average()
                sess["loadavg"] = sess.get("loadavg") or procstats.load_average()
                row[transport] = {"channel": chan, "sessions": sess,
                                  "cpu_ratio": _ratio(chan, sess)}
            rows.append(row)
    return {"relay": relay, "window_s": args.window, "server_cpu": args.server_cpu,
            "loadgen_cpu": args.loadgen_cpu, "targets": {
                "cpu_ratio_max": TARGET_RATIO, "whep_on_time_min": TARGET_ON_TIME},
            "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'N':>5} {'transport':9} {'mode':9} {'srv CPU%':>8} {'%/listener':>10} "
             f"{'on time':>8} {'gen CPU%':>8} {'ratio':>6} {'loadavg':>7} "
             f"(ratio target <= {TARGET_RATIO})"]
    for row in result["rows"]:
        n = row["listeners"]
        for transport in ("workers", "whep", "http"):
            if transport not in row:
                continue
            for mode in ("channel", "sessions"):
                r = row[transport][mode]
                if "error" in r:
                    lines.append(f"{n:5} {transport:9} {mode:9} error: {r['error'][:80]}")
                    continue
                cpu = r.get("server_cpu_pct")
                streams = r.get("connected") or n
                per = f"{cpu / streams:.3f}" if cpu is not None else "-"
                label = f"{mode}:{streams}" if transport == "workers" else mode
                on = r.get("on_time_share")
                ratio = row[transport]["cpu_ratio"] if mode == "channel" else None
                load = (r.get("loadavg") or [None])[0]
                lines.append(
                    f"{n:5} {transport:9} {label:9} {cpu!s:>8} {per:>10} "
                    f"{'-' if on is None else f'{on * 100:.2f}%':>8} "
                    f"{r.get('loadgen_cpu_pct')!s:>8} {'' if ratio is None else ratio!s:>6} "
                    f"{load!s:>7}")
    lines.append("CPU per listener is % of a core / N (workers: both workers' CPU / streams, "
                 "the sessions baseline capped at --session-cap streams); on time: WHEP "
                 f"packets within 5 ms (target >= {TARGET_ON_TIME * 100:.1f} %); a row at "
                 "loadavg > 1.5 is loaded")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listeners", type=lambda s: [int(x) for x in s.split(",")],
                        default=[50, 100])
    parser.add_argument("--transports", type=lambda s: s.split(","),
                        default=["workers", "whep", "http"],
                        help="workers (WHEP over 2 workers), whep, http (one gateway)")
    parser.add_argument("--session-cap", type=int, default=100,
                        help="the most sessions of the workers baseline (per-stream CPU)")
    parser.add_argument("--window", type=float, default=6.0)
    parser.add_argument("--relay", type=int, default=0, metavar="N",
                        help="also the two-worker relay run, N HTTP listeners per worker")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--loadgen-cpu", type=int, default=1)
    parser.add_argument("--out", default="channels")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    path = write_results(args.out, result)
    print(table(result))
    if result["relay"] is not None:
        print("relay:", json.dumps(result["relay"]))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
