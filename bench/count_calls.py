"""Where the gateway's CPU goes, counted: the load bench run with a call counter in the gateway.

``python -m bench.count_calls [--out DIR] -- <bench.load arguments>`` runs ``python -m
bench.load`` with ``bench/count_calls_site`` on ``PYTHONPATH``: its ``sitecustomize`` wraps, in
the gateway process only, the methods of ``WATCH`` -- the compiled send path's two C calls, a
ticker fire and its parts, the socket reads, consent both ways, sender reports, the path checks
-- counting calls and their thread CPU time. Then it prints, over the span the ticker fired at
full rate (the windows at the ladder's top), each one's calls a second, ms of CPU a second and
µs a call, beside the process's whole CPU: what the C calls take and what the rest (Python
control) takes, and writes bench/results/count_calls.json. For example::

    python -m bench.count_calls -- --server gateway --ladder 1000 --silent-window 24 \\
        --no-speech --min-on-time 0 --retries 0 --probe-overhead 0

The wrappers cost ≈ 1-2 µs a call (two clock reads), and a wrapped call inside another is in
both: read the figures as parts, not a sum (docs/density.md, "Consent, reports and path checks
in batches"). The counter's ``sitecustomize`` shadows any other one in that process.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import RESULTS

REPO = Path(__file__).resolve().parent.parent
SITE = Path(__file__).resolve().parent / "count_calls_site"

#: (module, class, method, label); the labels starting "C " are the compiled calls
WATCH: list[tuple[str, str, str, str]] = [
    ("gateway.net.udp_mux", "UdpMux", "_flush_compiled", "C flush (sendmmsg)"),
    ("gateway.net.sendpath", "CompiledBatch", "run_parked", "C run_parked"),
    ("gateway.media.ticker", "Ticker", "_fire_due", "a fire"),
    ("gateway.media.ticker", "Ticker", "fire_if_due", "a fire run from a read"),
    ("gateway.media.ticker", "Ticker", "_arm", "the timer re-armed"),
    ("gateway.media.ticker", "Ticker", "_poll_or_not", "packing decided"),
    ("gateway.webrtc.in_c", "HeldInC", "end_of_tick", "end of tick (C, flush, checks)"),
    ("gateway.webrtc.in_c", "HeldInC", "check_some", "path checks"),
    ("gateway.webrtc.batch_sender", "BatchStream", "_on_report", "a sender report"),
    ("gateway.net.udp_mux", "UdpMux", "_on_readable", "a read burst"),
    ("gateway.net.udp_mux", "UdpMux", "datagram_received", "a datagram routed"),
    ("gateway.aiortc_compat.consent_answer", "_Answer", "__call__", "STUN from the bytes"),
    ("gateway.aiortc_compat.consent", "_Clock", "_run", "the consent clock"),
    ("gateway.aiortc_compat.consent", "_ConsentCheck", "response_bytes", "an answer to our check"),
]
SPAN_LABEL = "a fire"


def environment(out: Path, every_s: float = 2.0) -> dict[str, str]:
    """The load bench's environment: the counter on ``PYTHONPATH``, what to watch, where to
    write."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), env.get("PYTHONPATH")) if p)
    env["COUNT_CALLS_OUT"] = str(out)
    env["COUNT_CALLS_WATCH"] = json.dumps([list(w) for w in WATCH])
    env["COUNT_CALLS_EVERY_S"] = str(every_s)
    return env


def summarise(rows: list[dict[str, list[float]]], span_label: str = SPAN_LABEL
              ) -> dict[str, Any]:
    """Rates over the steady span: the longest run of intervals where ``span_label`` was
    called at ≥ 80 % of its highest rate and the process's CPU was within 15 % of those
    intervals' median (not the ramp, whose connections cost more): ``{"seconds",
    "cpu_ms_per_s", "c_ms_per_s", "rest_ms_per_s", "calls": {label: {"per_s", "ms_per_s",
    "us_each"}}}``; ValueError when ``span_label`` was never counted."""
    pairs = list(itertools.pairwise(rows))
    rates, cpus = [], []
    for before, after in pairs:
        seconds = max(after["_mono"][1] - before["_mono"][1], 1e-9)
        rates.append((after.get(span_label, [0, 0])[0] - before.get(span_label, [0, 0])[0])
                     / seconds)
        cpus.append((after["_cpu"][1] - before["_cpu"][1]) / seconds)
    if not rates or max(rates) <= 0:
        raise ValueError(f"no span: {span_label!r} was never counted")
    busy = [i for i, rate in enumerate(rates) if rate >= 0.8 * max(rates)]
    median = sorted(cpus[i] for i in busy)[len(busy) // 2]
    steady = {i for i in busy if cpus[i] <= 1.15 * median}
    runs: list[list[int]] = []
    for i in sorted(steady):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    span = max(runs, key=len)
    first, last = pairs[span[0]][0], pairs[span[-1]][1]
    seconds = last["_mono"][1] - first["_mono"][1]
    calls: dict[str, dict[str, float]] = {}
    for label in sorted(k for k in last if not k.startswith("_")):
        count = last[label][0] - first.get(label, [0, 0.0])[0]
        spent = last[label][1] - first.get(label, [0, 0.0])[1]
        calls[label] = {"per_s": count / seconds, "ms_per_s": spent / seconds * 1e3,
                        "us_each": spent / count * 1e6 if count else 0.0}
    cpu = (last["_cpu"][1] - first["_cpu"][1]) / seconds * 1e3
    in_c = sum(v["ms_per_s"] for k, v in calls.items() if k.startswith("C "))
    return {"seconds": seconds, "cpu_ms_per_s": cpu, "c_ms_per_s": in_c,
            "rest_ms_per_s": cpu - in_c, "calls": calls}


def read_rows(path: Path) -> list[dict[str, list[float]]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def show(summary: dict[str, Any]) -> None:
    print(f"counted over {summary['seconds']:.1f} s: the gateway's CPU "
          f"{summary['cpu_ms_per_s']:.0f} ms a second; in the C calls "
          f"{summary['c_ms_per_s']:.0f}, the rest (Python control) "
          f"{summary['rest_ms_per_s']:.0f}")
    print(f"{'what':<32} {'calls/s':>8} {'ms/s':>7} {'µs each':>8}")
    for label, v in summary["calls"].items():
        print(f"{label:<32} {v['per_s']:>8.0f} {v['ms_per_s']:>7.1f} {v['us_each']:>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(RESULTS / "count_calls.json"))
    parser.add_argument("load_args", nargs=argparse.REMAINDER,
                        help="after --: bench.load's arguments")
    args = parser.parse_args()
    load_args = [a for a in args.load_args if a != "--"]
    with tempfile.TemporaryDirectory(prefix="count-calls-") as tmp:
        done = subprocess.run([sys.executable, "-m", "bench.load", *load_args], cwd=REPO,
                              env=environment(Path(tmp)), check=False)
        files = sorted(Path(tmp).glob("calls-*.jsonl"))
        if not files:
            sys.exit(f"no counts written (bench.load exited {done.returncode})")
        summary = summarise(read_rows(files[-1]))
    show(summary)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"load_args": load_args, **summary}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
