"""HTTP streaming bench: first-audio latency, and N live streams on one core against a baseline.

    python -m bench.http_stream [--phases latency,density,baseline,flush]
                                [--streams 100,250,500] [--seconds 20] [--runs 15] [--quick]

Phases (bench/results/http_stream.json, a table on stdout, bench/results/http_stream.png):

- ``latency`` (bench/http_latency.py): request -> first audio byte over HTTP, ``--runs``
  requests per row and route (``frames``: ``POST /v1/speech/stream``, first frame record;
  ``opus``: ``POST /v1/audio/speech``, first Ogg page after OpusHead/OpusTags): Piper, a
  phrase-cache hit, the CosyVoice stand-in with a 150 ms first-chunk delay, each with the
  backend's own first-chunk time. Targets: Piper median <= 120 ms; the stand-in's median
  <= 10 ms above its own first-chunk median.
- ``density`` (bench/http_density.py): for each N of ``--streams`` (a ladder; targets are
  judged at the largest), N concurrent ``pace: live`` streams from one gateway process pinned
  to ``--server-cpu`` (``taskset``), the load generator (bench/http_loadgen.py, one uvloop
  process, raw asyncio readers that count frame records or Ogg pages without decoding) pinned
  to ``--loadgen-cpu``. What is spoken: a ``--phrase-s`` long 440 Hz tone (a ``wav:`` voice of a
  file this script writes), spoken once beforehand through a gateway that persists its phrase
  cache (``--phrase-cache-dir``); every measured gateway loads that directory at start-up, so
  every stream is a phrase-cache replay (no synthesis, no encoding). Measured in a
  ``--seconds`` window once all streams have their first frame: the server's CPU % (/proc,
  100 = the core), RSS added over the idle process (after one warm-up request) for all
  streams and per stream, frame lateness at the readers against the live schedule (arrival of
  frame i vs first arrival + max(0, i * 20 ms - lead)): p50/p99, share within 20 / 50 ms,
  whether every stream ran (200, no error, >= 90 % of its frames), writes/s (HTTP chunks at
  the readers), server CPU µs per frame delivered, and the load generator's own CPU and loop
  lag. Targets: <= 30 % of the core, <= 40 MB added for all streams, all streams ran. A run
  whose server core other processes kept > 20 % busy is measured again (``--retries``).
- ``baseline``: the same load against bench/http_baseline_server.py (Starlette on uvicorn, a
  ``StreamingResponse`` fed by an ``asyncio.Queue(50)`` of the same frames, read from the same
  phrase cache directory, paced by ``asyncio.sleep`` with the same lead), pinned the same way;
  ratios gateway/baseline for CPU and RSS.
- ``flush``: the density load on a gateway started with ``--http-flush frame`` (every frame its
  own write) next to the default ``--http-flush adaptive`` (the density phase's run).

``--cadence-probe 60,150`` adds runs at the largest N of the gateway with live frames written
every 60 / 150 ms (``--live-write-ms``) instead of the default cadence.
``--profile`` adds a py-spy recording of the gateway (adaptive) under the same load, taken in
a separate run so it does not disturb the measured one (collapsed stacks next to the JSON,
the top functions in it). ``--nice -5`` (as root) favours this bench's process tree over
other work on a shared machine (the nice value and the scheduler autogroup's); the ``oth%``
column says how much of the server's core other processes took anyway.
``--quick``: 3 runs, 20 streams, 5 s, no retries (under a minute on a quiet machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import procstats
from bench.common import RESULTS, write_results
from bench.http_density import ROUTE, density_phases, ratios
from bench.http_report import plot, print_tables, verdicts
from bench.load import REPO

PHASES = ("latency", "density", "baseline", "flush")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def checkout() -> dict[str, Any]:
    """Which code was measured (read-only git: no index refresh)."""
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "--no-optional-locks", *cmd], capture_output=True,
                              text=True, cwd=REPO, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "gateway").splitlines()
    return {"head": git("rev-parse", "HEAD"), "gateway_files_modified": len(dirty)}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    bad = set(phases) - set(PHASES)
    if bad:
        raise SystemExit(f"unknown phases {sorted(bad)}; choose from {', '.join(PHASES)}")
    started = time.monotonic()
    data: dict[str, Any] = {"settings": {
        "phases": phases, "runs": args.runs, "ladder": args.ladder, "streams": max(args.ladder),
        "window_s": args.seconds, "ramp_s": args.ramp_s, "settle_s": args.settle_s,
        "batch": args.batch, "phrase_s": args.phrase_s, "lead_ms": args.lead_ms,
        "format": args.format, "server_cpu": args.server_cpu, "loadgen_cpu": args.loadgen_cpu,
        "retries": args.retries, "quick": args.quick, "cadence_probe_ms": args.cadence_probe,
        "nice": args.nice,
    }, "checkout": checkout(), "loadavg_start": procstats.load_average()}
    if "latency" in phases:
        from bench.http_latency import latency_phase

        data["latency"] = await latency_phase(args.runs, log, warmups=1 if args.quick else 2)
    if set(phases) & {"density", "baseline", "flush"}:
        data.update(await density_phases(phases, args, log))
        data["ratios_gateway_over_baseline"] = ratios(data["density"])
    data["verdict"] = verdicts(data)
    data["duration_s"] = round(time.monotonic() - started, 1)
    data["loadavg_end"] = procstats.load_average()
    return data


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument("--streams", default="100,250,500",
                   help="concurrent live streams: N or a ladder N1,N2,... (targets at the max)")
    p.add_argument("--seconds", type=float, default=20.0, help="measured window, s")
    p.add_argument("--runs", type=int, default=15, help="requests per latency row and route")
    p.add_argument("--ramp-s", type=float, default=None,
                   help="time to open all streams (default N / 200 s, at least 0.5)")
    p.add_argument("--settle-s", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=25, help="streams opened at a time")
    p.add_argument("--phrase-s", type=float, default=None,
                   help="the tone's length (default: enough to outlast the window)")
    p.add_argument("--lead-ms", type=float, default=200.0, help="live lead, both servers")
    p.add_argument("--format", choices=sorted(ROUTE), default="frames",
                   help="density streams: the framed stream or Ogg/Opus")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--loadgen-cpu", type=int, default=1)
    p.add_argument("--retries", type=int, default=1,
                   help="measure a run again when other processes took > 20 %% of the "
                   "server's core")
    p.add_argument("--profile", action="store_true", help="py-spy the gateway in an extra run")
    p.add_argument("--cadence-probe", default="", metavar="MS,MS",
                   help="extra runs at the largest N of the gateway with another live write "
                   "cadence (--live-write-ms), e.g. 60,150")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness for this bench and every process it starts (negative, as "
                   "root: favour them over other work on a shared machine)")
    p.add_argument("--quick", action="store_true", help="smoke run: 3 runs, 20 streams, 5 s")
    p.add_argument("--out", default=str(RESULTS / "http_stream.json"))
    args = p.parse_args(argv)
    args.ladder = sorted({int(x) for x in str(args.streams).split(",") if x.strip()})
    args.cadence_probe = [float(x) for x in args.cadence_probe.split(",") if x.strip()]
    if args.quick:
        args.runs, args.seconds, args.retries = min(args.runs, 3), 5.0, 0
        args.ladder = [min(20, max(args.ladder))]
        args.settle_s = min(args.settle_s, 0.5)
    ramp = args.ramp_s if args.ramp_s is not None else max(0.5, max(args.ladder) / 200)
    if args.phrase_s is None:
        args.phrase_s = max(15.0 if args.quick else 60.0,
                            ramp + args.settle_s + args.seconds + 15)
    if os.cpu_count() and max(args.server_cpu, args.loadgen_cpu) >= os.cpu_count():
        p.error(f"only {os.cpu_count()} CPUs (a negative CPU: not pinned)")
    return args


def prioritise(nice: int) -> int | None:
    """Raise (negative) or lower this process tree's priority on a shared machine: the nice
    value, and the scheduler autogroup's (with autogroups, per-process nice only ranks
    processes within one session). Every server and load generator started from here
    inherits it. Returns the autogroup nice set, or None."""
    if not nice:
        return None
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        return None
    return nice


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.autogroup_nice = prioritise(args.nice)
    data = asyncio.run(main_async(args))
    out = Path(args.out)
    png = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    data["plot"] = plot(data, png)
    if out.resolve() == (RESULTS / "http_stream.json").resolve():
        path = write_results("http_stream", data)
    else:
        from bench.common import machine

        out.write_text(json.dumps({"benchmark": "http_stream", "machine": machine(), **data},
                                  indent=2))
        path = out
    print_tables(data)
    print(f"written {path}" + (f" and {png}" if data["plot"] else " (no matplotlib: no plot)"))
    return data


if __name__ == "__main__":
    main()
