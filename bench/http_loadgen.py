"""Load generator for bench/http_stream.py: N concurrent live HTTP audio streams, one process.

Runs as its own process (pinned to a core of its own by the caller) on uvloop when installed.
Every stream is one raw-asyncio ``AudioStreamReader`` (bench/http_wire.py): it posts the same
JSON body and counts audio units (frame records or Ogg pages) and HTTP chunks as they arrive,
with no Opus decode. Streams are opened ``--batch`` at a time over ``--ramp-s``; once every
stream has its first frame and ``--settle-s`` has passed, a window of ``--window-s`` is
measured, then every connection is dropped.

In the window:
- server CPU % (``/proc/PID/stat``, all threads; 100 = one core), the server core's busy %
  (``/proc/stat``: whoever ran there), server RSS (sampled every 0.25 s: median and max);
- this process's own CPU % and its event-loop lag (a 10 ms timer's oversleep), so a busy
  load generator is visible instead of being counted as server lateness;
- lateness of each frame i of a stream: arrival_i - (arrival_0 + max(0, i * 20 ms - lead)), the
  live schedule both servers promise (frame i due i * 20 ms - lead after the first, frames due
  at once before that), for the frames that arrived in the window;
- writes/s (HTTP chunks) and frames/s at the readers; a stream "ran" if it answered 200, had no
  error and received >= 90 % of the window's 50 frames/s.

    python -m bench.http_loadgen --port P --body '{"text": "x", "pace": "live"}' --streams 500 \
        --server-pid PID --out out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench import procstats
from bench.http_wire import AudioStreamReader, request_bytes

FRAME_S = 0.020


def _pct(values: np.ndarray, q: float) -> float | None:
    return None if values.size == 0 else round(float(np.percentile(values, q)) * 1000, 2)


def lateness(
    readers: list[AudioStreamReader], starts: list[int], ends: list[int], lead_s: float
) -> dict[str, Any]:
    """Frame lateness against the live schedule, for the frames that arrived in the window."""
    parts = []
    for reader, s0, s1 in zip(readers, starts, ends, strict=True):
        if s1 <= s0:
            continue
        arr = np.frombuffer(reader.arrivals, dtype=np.float64)
        idx = np.arange(s0, s1)
        expected = arr[0] + np.maximum(0.0, idx * FRAME_S - lead_s)
        parts.append(arr[s0:s1] - expected)
    late = np.concatenate(parts) if parts else np.zeros(0)
    return {
        "frames": int(late.size),
        "p50_ms": _pct(late, 50), "p90_ms": _pct(late, 90), "p99_ms": _pct(late, 99),
        "p999_ms": _pct(late, 99.9),
        "max_ms": None if late.size == 0 else round(float(late.max()) * 1000, 2),
        "min_ms": None if late.size == 0 else round(float(late.min()) * 1000, 2),
        "within_20ms": None if late.size == 0 else round(float(np.mean(late <= 0.020)), 5),
        "within_50ms": None if late.size == 0 else round(float(np.mean(late <= 0.050)), 5),
    }


async def lag_monitor(samples: list[float], stop: asyncio.Event, period: float = 0.010) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(period)
        samples.append(loop.time() - t - period)


async def rss_sampler(pid: int, samples: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            samples.append(procstats.rss_kb(pid))
        except (OSError, RuntimeError):
            return
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


async def open_all(
    args: argparse.Namespace, request: bytes
) -> tuple[list[AudioStreamReader], list[str], float]:
    loop = asyncio.get_running_loop()
    readers: list[AudioStreamReader] = []
    failures: list[str] = []
    started = time.monotonic()
    batches = max(1, -(-args.streams // args.batch))
    gap = args.ramp_s / batches

    async def one() -> None:
        try:
            _, reader = await loop.create_connection(
                lambda: AudioStreamReader(request, args.kind), args.host, args.port
            )
            readers.append(reader)
        except OSError as exc:
            failures.append(repr(exc))

    for b in range(batches):
        count = min(args.batch, args.streams - b * args.batch)
        await asyncio.gather(*(one() for _ in range(count)))
        due = started + (b + 1) * gap
        if due > time.monotonic():
            await asyncio.sleep(due - time.monotonic())
    return readers, failures, time.monotonic() - started


async def run(args: argparse.Namespace) -> dict[str, Any]:
    request = request_bytes(args.host, args.port, args.path, json.loads(args.body))
    me = os.getpid()
    readers, failures, ramp = await open_all(args, request)
    deadline = time.monotonic() + args.first_timeout
    while time.monotonic() < deadline and any(  # noqa: ASYNC110 (polls hundreds of readers)
        not r.arrivals and not r.done.done() for r in readers
    ):
        await asyncio.sleep(0.05)
    first_ms = [
        (r.arrivals[0] - r.sent_at) * 1000 for r in readers if r.arrivals
    ]
    await asyncio.sleep(args.settle_s)

    stop = asyncio.Event()
    lags: list[float] = []
    rss: list[int] = []
    tasks = [asyncio.create_task(lag_monitor(lags, stop)),
             asyncio.create_task(rss_sampler(args.server_pid, rss, stop))]
    starts = [len(r.arrivals) for r in readers]
    chunks0 = [r.chunks for r in readers]
    bytes0 = sum(r.body_bytes for r in readers)
    cores0 = procstats.core_times()
    srv0, me0 = procstats.cpu_sample(args.server_pid), procstats.cpu_sample(me)
    await asyncio.sleep(args.window_s)
    srv1, me1 = procstats.cpu_sample(args.server_pid), procstats.cpu_sample(me)
    cores1 = procstats.core_times()
    ends = [len(r.arrivals) for r in readers]
    chunks1 = [r.chunks for r in readers]
    bytes1 = sum(r.body_bytes for r in readers)
    wall = srv1.at - srv0.at
    stop.set()
    await asyncio.gather(*tasks)

    expected = args.window_s / FRAME_S
    ok = [
        r.status == 200 and r.error is None and (e - s) >= 0.9 * expected
        for r, s, e in zip(readers, starts, ends, strict=True)
    ]
    errors = sorted({r.error for r in readers if r.error})[:5] + failures[:5]
    frames = sum(ends) - sum(starts)
    writes = sum(chunks1) - sum(chunks0)
    busy = procstats.core_busy_percent(cores0, cores1)
    result = {
        "streams": args.streams,
        "opened": len(readers),
        "connect_failures": len(failures),
        "status_200": sum(r.status == 200 for r in readers),
        "streams_ran": sum(ok),
        "ended_early": sum(r.done.done() for r in readers),
        "errors": errors,
        "ramp_s": round(ramp, 2),
        "request_to_first_frame_ms": {
            "p50": round(statistics.median(first_ms), 2) if first_ms else None,
            "p99": round(float(np.percentile(first_ms, 99)), 2) if first_ms else None,
            "max": round(max(first_ms), 2) if first_ms else None,
        },
        "window_s": round(wall, 3),
        "server_cpu_pct": round(procstats.cpu_percent(srv0, srv1), 1),
        "server_sys_pct": round(100 * (srv1.sys_s - srv0.sys_s) / wall, 1),
        "server_core_busy_pct": busy.get(args.server_cpu) if args.server_cpu >= 0 else None,
        "core_busy_pct": busy,
        "server_rss_kb": {"median": int(statistics.median(rss)) if rss else None,
                          "max": max(rss) if rss else None},
        "loadgen_cpu_pct": round(procstats.cpu_percent(me0, me1), 1),
        "loadgen_loop_lag_ms": {
            "p50": _pct(np.array(lags), 50), "p99": _pct(np.array(lags), 99),
            "max": round(max(lags) * 1000, 2) if lags else None,
        },
        "frames_per_s": round(frames / wall, 1),
        "writes_per_s": round(writes / wall, 1),
        "frames_per_write": round(frames / writes, 3) if writes else None,
        "body_kbit_per_s": round((bytes1 - bytes0) * 8 / wall / 1000, 1),
        "frames_per_stream_per_s": round(frames / wall / max(1, len(readers)), 2),
        "lateness": lateness(readers, starts, ends, args.lead_ms / 1000),
    }
    for r in readers:
        r.close()
    await asyncio.sleep(0.2)  # let the aborts go out before the process exits
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--path", default="/v1/speech/stream")
    p.add_argument("--body", required=True, help="the JSON request body")
    p.add_argument("--kind", choices=["frames", "ogg"], default="frames")
    p.add_argument("--streams", type=int, default=500)
    p.add_argument("--batch", type=int, default=25, help="connections opened at a time")
    p.add_argument("--ramp-s", type=float, default=2.0)
    p.add_argument("--settle-s", type=float, default=1.0)
    p.add_argument("--first-timeout", type=float, default=20.0)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--lead-ms", type=float, default=200.0)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        p.error("this load generator only targets the loopback interface")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:
        result = asyncio.run(run(args))
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
