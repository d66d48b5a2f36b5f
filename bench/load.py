"""Stream density: the gateway against a stock-aiortc baseline, N concurrent speaking streams.

For each server and each N of the ladder, a fresh server process is pinned to one core
(``taskset -c SERVER_CPU``) and a fresh load generator (``bench.loadgen``) to the other
(``taskset -c LOADGEN_CPU``). The generator connects N WebRTC sessions through the public API
(``--batch`` at a time), measures a silent window, asks every session to speak, and measures a
speaking window; the server's CPU and RSS come from /proc. A server's ladder stops at the first
N that breaks: on-time share < ``--min-on-time``, a session that fails to connect or to start
speaking, or one that receives nothing.

What speaks: the gateway gets a ``wav:`` voice holding a ``--phrase-s`` long 440 Hz tone (24 kHz
mono) written by this script; each session queues the same text enough times to outlast the
measurement. ``--gateway-speech cache`` (the default when the gateway has a phrase cache) plays
that phrase once to warm a persisted phrase cache, so every utterance in the rungs is a cache
hit: no synthesis, no encoding, only the media path is measured. ``encode`` turns the cache off:
every frame is Opus-encoded by the gateway (synthesis is one memcpy of the WAV per utterance).
The baseline encodes a 48 kHz 440 Hz tone through aiortc. In the silent window (before speech)
the gateway sends its pre-encoded silence packet and the baseline still encodes silence.
Arrival times are the kernel's receive timestamps, so the load generator's own delays do not
count against the server (they are reported: ``loadgen_hook_delay_ms``).

    python -m bench.load [--ladder 50,100,250] [--window 10] [--server gateway|baseline|both]
    python -m bench.load --server designs --ladder 250,500,750,1000   # issue 16
    python -m bench.load --server paths --floor --ladder 500,1000   # issue 28
    python -m bench.load --server loss --floor --ladder 500   # issue 28: RED and NACK at work

``--server paths`` compares the send paths rung by rung: ``gateway`` (``--send-path auto``: the
compiled path where it builds) against ``gateway-python`` (``--send-path python``). ``--floor``
measures the machine's floor (bench/floor.py) on the server's core before the ladder and prints
every gateway rung's µs/packet as a ratio to it (issue 28's target: ≤ 2.0), and beside it the
ratio to the floor at the rung's fan-out (``floor_fanout``: SRTP and ``sendmmsg`` called from C
to N destination sockets a drainer on the load generator's core reads, N SRTP contexts, paced
as the tick grid sends -- what a perfect sender pays at N streams on this machine), and the
ratio to that floor made with the gateway's own SRTP (net/srtp_tx.py) in it, which is faster
than the libsrtp the floor is defined with (``floor_fanout_srtp_c``). ``--srtp-profile cm``
makes the load generator offer only AES_CM_128_HMAC_SHA1_80, what Chromium and the gateway
settle on (aiortc peers otherwise choose AES-256-GCM).

``--server loss`` runs the same gateway rung by rung for clean listeners and for listeners that
drop ``--loss`` (2 %) of the RTP at random, NACK each drop at once and offer RED
(bench/loadgen_loss.py): what repair costs the gateway per packet, and how long it takes.

``--server designs`` compares the gateway's two UDP designs in one run, rung by rung
(interleaved, so a drifting VM moves both alike): ``gateway`` (every session on one shared UDP
socket, a tick's RTP in one ``sendmmsg``) against ``gateway-nomux`` (``--no-udp-mux``: one
socket per session, aioice's random port, one ``sendto`` per packet: the design before). Each
rung also records the server's UDP sockets while every session is connected.

Results: bench/results/load.json, a table on stdout, bench/results/load.png (needs matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench import perf_profile, procstats, veth_floor
from bench.common import RESULTS, free_port, machine, stop, wait_healthy
from bench.floor import netns_exec
from bench.loadgen import LONG_TEXT, LoadSession
from gateway import aiortc_compat
from gateway.tts.tone import write_wav_mono

REPO = Path(__file__).resolve().parent.parent  # the processes run from here (python -m bench.*)
DEFAULT_LADDER = "10,25,50,100,250,500,750,1000"
SERVERS = ("gateway", "baseline")
DESIGNS = ("gateway", "gateway-nomux")  # the shared UDP socket against one per session
PATHS = ("gateway", "gateway-python")  # the compiled send path (auto) against the Python one
KIND_FLAGS = {"gateway-nomux": ["--no-udp-mux"], "gateway-python": ["--send-path", "python"]}
# The same gateway with its listeners losing --loss of the RTP at random and NACKing it, RED
# offered (bench/loadgen_loss.py): issue 28's figures "with RED and NACK at work".
LOSS = ("gateway", "gateway-loss")


def tone_wav(path: Path, seconds: float, hz: float = 440.0, rate: int = 24_000) -> Path:
    n = np.arange(round(seconds * rate))
    write_wav_mono(path, (np.sin(2 * np.pi * hz * n / rate) * 0.3 * 32767).astype("<i2"), rate)
    return path


NICE = 0  # niceness increment for the measured processes (--nice)
#: (--veth) where the server listens and gathers ICE, where the load generator does, and what
#: the generator's command starts with: all loopback, or the two ends of bench.veth_floor's pair
HOST = "127.0.0.1"
LOADGEN_HOST = "127.0.0.1"
LOADGEN_PREFIX: list[str] = []


def _child_setup() -> None:
    """In each server / load generator child: many sockets, and the requested priority."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if NICE:
        # With sched autogroup (the Linux default) nice only ranks a process within its
        # session: start a session of our own and give that group the niceness too.
        os.setsid()
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
            f.write(str(NICE))
        os.nice(NICE)


def server_command(
    kind: str, port: int, sessions: int, wav: Path, extra: list[str] | None = None
) -> list[str]:
    if kind.startswith("gateway"):
        return [
            sys.executable, "-m", "gateway", "--host", HOST, "--port", str(port),
            "--ice-hosts", HOST,
            "--log-level", "WARNING", "--max-sessions", str(sessions + 50),
            "--connect-timeout", "120", "--voice", f"bench=wav:{wav}", *(extra or []),
            *KIND_FLAGS.get(kind, []),
        ]
    return [sys.executable, "-m", "bench.baseline_server", "--port", str(port)]


def gateway_flags() -> str:
    """``python -m gateway --help``: which options this checkout's gateway has."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", "--help"], capture_output=True, text=True, check=False,
        cwd=REPO,
    ).stdout


def utterances_for(n: int, args: argparse.Namespace) -> int:
    """Speech requests per session so speech outlasts requests + settle + window + probes
    (at most 30: the gateway queues 32 per session)."""
    needed = args.window + 15 + n / 25
    return min(30, max(1, math.ceil(needed / args.phrase_s)))


async def warm_phrase_cache(
    cache_dir: Path, wav: Path, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    """Play the phrase once to the end in a gateway that persists its phrase cache to
    ``cache_dir``; every rung's gateway then loads it at start-up, so all speech is cache hits
    (no synthesis, no encoding) from the first request on."""
    port = free_port()
    url = f"http://{HOST}:{port}"
    log = tmp / "warm.log"
    started = time.monotonic()
    server = spawn_server(
        server_command("gateway", port, 1, wav, ["--phrase-cache-dir", str(cache_dir)]), log
    )
    state: dict[str, Any] = {}
    try:
        await wait_healthy(url, server, lambda: tail(log), 60)
        aiortc_compat.restrict_ice_hosts([HOST])
        timeout = aiohttp.ClientTimeout(total=args.phrase_s + 90)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            session = LoadSession(0, url, http, full=False)
            try:
                if not await session.connect(30):
                    raise RuntimeError(f"warm-up session did not connect: {session.error}")
                reply = await session.speak(LONG_TEXT)
                deadline = time.monotonic() + args.phrase_s + 60
                while state.get("state") not in ("done", "failed", "interrupted"):
                    if time.monotonic() > deadline:
                        raise TimeoutError("warm-up utterance did not finish")
                    async with http.get(
                        url + reply["location"], params={"wait": "1", "timeout": "60"}
                    ) as r:
                        state = await r.json(content_type=None)
                await asyncio.sleep(0.5)  # the cache stores the phrase when it is DONE
            finally:
                await session.close()
    finally:
        stop(server)  # the cache's writer thread finishes its writes on shutdown
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    if state.get("state") != "done" or not files:
        raise RuntimeError(f"phrase cache warm-up failed: {state}, {len(files)} files, "
                           f"{tail(log)}")
    return {"seconds": round(time.monotonic() - started, 1), "files": len(files),
            "frames": state.get("frames_sent")}


def pinned(cmd: list[str], cpu: int | None) -> list[str]:
    """``cmd`` pinned to ``cpu`` (None or negative, or no taskset: unpinned)."""
    if cpu is None or cpu < 0 or shutil.which("taskset") is None:
        return cmd
    return ["taskset", "-c", str(cpu), *cmd]


def tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def spawn_server(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as logf:
        return subprocess.Popen(
            cmd, stdout=logf, stderr=subprocess.STDOUT, preexec_fn=_child_setup, cwd=REPO
        )


async def fetch_health(url: str) -> dict[str, Any] | None:
    """The server's /healthz after the windows (the gateway's GC and loop-stall counters)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.get(f"{url}/healthz") as r:
                return dict(await r.json())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def run_rung(
    kind: str, n: int, args: argparse.Namespace, wav: Path, tmp: Path, gateway_extra: list[str]
) -> dict:
    port = free_port()
    url = f"http://{HOST}:{port}"
    log = tmp / f"{kind}-{n}.log"
    out = tmp / f"{kind}-{n}.json"
    rung: dict[str, Any] = {"server": kind, "n": n, "loadavg_before": procstats.load_average()}
    server = spawn_server(
        pinned(server_command(kind, port, n, wav, gateway_extra), args.server_cpu), log
    )
    try:
        await wait_healthy(url, server, lambda: tail(log), 60)
        await asyncio.sleep(0.5)
        rung["idle_rss_kb"] = procstats.rss_kb(server.pid)
        cmd = [
            sys.executable, "-m", "bench.loadgen", "--url", url,
            "--server-pid", str(server.pid), "--sessions", str(n), "--full", str(args.full),
            "--batch", str(args.batch), "--window", str(args.window),
            "--silent-window", str(args.silent_window), "--out", str(out),
            "--ice-host", LOADGEN_HOST,
        ]
        if kind.startswith("gateway"):
            cmd += ["--utterances", str(utterances_for(n, args))]
            if args.probe_overhead:
                cmd += ["--probe-overhead", str(args.probe_overhead)]
        if args.no_speech:
            cmd.append("--no-speech")
        if args.srtp_profile != "any":
            cmd += ["--srtp-profile", args.srtp_profile]
        if kind == "gateway-loss":
            cmd += ["--loss", str(args.loss), "--red"]
        if args.profile and n == args.profile:
            profile = Path(args.out).with_name(f"load-profile-{kind}-{n}.txt")
            cmd += ["--profile", str(profile), "--profiler", args.profiler]
        gen = await asyncio.create_subprocess_exec(
            *LOADGEN_PREFIX, *pinned(cmd, args.loadgen_cpu),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=REPO,
            preexec_fn=_child_setup,
        )
        sockets = asyncio.create_task(watch_udp_sockets(server.pid, rung))
        try:
            output, _ = await asyncio.wait_for(gen.communicate(), args.rung_timeout)
        except TimeoutError:
            gen.kill()
            await gen.wait()
            rung["error"] = "load generator timed out"
            return rung
        finally:
            sockets.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sockets
        if gen.returncode != 0 or not out.exists():
            rung["error"] = f"load generator failed ({gen.returncode}): " + output.decode(
                errors="replace"
            )[-1500:]
            return rung
        rung.update(json.loads(out.read_text()))
        rung["server_health"] = await fetch_health(url)
        profile = (rung.get("speaking") or rung.get("silent") or {}).get("profile")
        if profile and Path(profile).exists():
            rung["profile_top"] = (perf_profile.summary(Path(profile))
                                   if args.profiler == "perf" else profile_top(Path(profile)))
        if server.poll() is not None:
            rung["error"] = f"server died: {tail(log)}"
    finally:
        stop(server)
        rung["server_log_tail"] = tail(log, 600) or None
        if log.exists():  # kept next to the results: stall reports, errors
            kept = Path(args.out).with_name(f"{Path(args.out).stem}-{kind}-{n}.log")
            shutil.copyfile(log, kept)
            rung["server_log"] = str(kept)
    return rung


async def watch_udp_sockets(pid: int, rung: dict[str, Any], every_s: float = 1.0) -> None:
    """The server's UDP sockets, sampled while the load generator runs (the most seen)."""
    while True:
        count = procstats.udp_sockets(pid)
        if count is not None:
            rung["udp_sockets_max"] = max(rung.get("udp_sockets_max", 0), count)
        await asyncio.sleep(every_s)


def profile_top(path: Path, top: int = 25) -> dict[str, Any]:
    """Summarise py-spy's collapsed stacks: share of samples per function, self and inclusive."""
    self_n: dict[str, int] = {}
    incl_n: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
                  + ")" if " (" in f else f for f in stack.split(";")]
        self_n[frames[-1]] = self_n.get(frames[-1], 0) + n
        for f in set(frames):
            incl_n[f] = incl_n.get(f, 0) + n

    def best(d: dict[str, int]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in
                sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    return {"samples": total, "self_pct": best(self_n), "inclusive_pct": best(incl_n)}


def verdict(rung: dict[str, Any], min_on_time: float, speech: bool) -> list[str]:
    """Why this rung counts as broken (empty: it held)."""
    why: list[str] = []
    if rung.get("error"):
        why.append(rung["error"].splitlines()[0][:120])
    connect = rung.get("connect", {})
    if connect.get("failed"):
        why.append(f"{connect['failed']} connect failures")
    if speech:
        reqs = rung.get("speech_requests", {})
        if reqs.get("failed"):
            why.append(f"{reqs['failed']} speech requests failed")
    window = rung.get("speaking" if speech else "silent") or {}
    if not window.get("sessions_measured"):
        why.append("nothing measured")
        return why
    if window.get("sessions_without_packets"):
        why.append(f"{window['sessions_without_packets']} sessions received nothing")
    if window["on_time_share"] < min_on_time:
        why.append(f"on time {window['on_time_share']:.1%} < {min_on_time:.0%}")
    if speech and window.get("speech_share", 1) < 0.95:
        why.append(f"only {window['speech_share']:.0%} of frames were speech")
    return why


def warnings(rung: dict[str, Any], gateway_speech: str | None) -> list[str]:
    """Reasons to doubt what the rung measured (it is not marked broken for them)."""
    out: list[str] = []
    probe = rung.get("server_overhead_ms") or {}
    if probe.get("served_from_phrase_cache"):  # probes are meant to be synthesized
        out.append(f"{probe['served_from_phrase_cache']} overhead probes were phrase cache hits")
    for phase in ("silent", "speaking"):
        w = rung.get(phase) or {}
        delay = (w.get("loadgen_hook_delay_ms") or {}).get("p99")
        if w.get("loadgen_cpu_pct", 0) > 80:
            out.append(f"{phase}: the load generator was busy ({w['loadgen_cpu_pct']} % CPU)")
        if w.get("arrival_clock") not in (None, "kernel") and delay is not None and delay > 5:
            out.append(f"{phase}: arrival times partly from our hook, p99 {delay:.1f} ms late")
    for check in rung.get("decode_check") or []:
        if check.get("packets") and abs((check.get("peak_hz") or 0) - 440) > 5:
            out.append(f"decoded session {check['session']} peaks at {check['peak_hz']} Hz")
    return out


def contention(rung: dict[str, Any], server_cpu: int, speech: bool) -> float | None:
    """The share of the server's core that other processes took in the measured window, when
    it is large enough (> 20 %) to make the result suspect; else None."""
    window = rung.get("speaking" if speech else "silent") or {}
    busy = (window.get("core_busy_pct") or {}).get(str(server_cpu))
    if busy is None or server_cpu < 0:
        return None
    others = busy - window.get("server_cpu_pct", 0.0)
    return round(others, 1) if others > 20 else None


def per_stream_rss(rungs: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    """RSS slope over N (KB per added stream) for the rungs that held."""
    pts = [
        (r["n"], r[phase]["server_rss_kb"]) for r in rungs
        if not r.get("broken") and r.get(phase, {}).get("server_rss_kb")
    ]
    fit = procstats.linear_fit([float(n) for n, _ in pts], [float(kb) for _, kb in pts])
    return {
        "kb_per_stream": None if fit is None else round(fit[0], 1),
        "intercept_mb": None if fit is None else round(fit[1] / 1024, 1),
        "points": pts,
    }


def row(r: dict[str, Any], phase: str, server_cpu: int = 0) -> str:
    w = r.get(phase) or {}
    c = r.get("connect") or {}

    def f(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, int | float) else "-"

    rss = w.get("server_rss_kb")
    per = (rss - r["idle_rss_kb"]) / r["n"] if rss and r.get("idle_rss_kb") else None
    late = w.get("lateness_ms") or {}
    busy = (w.get("core_busy_pct") or {}).get(str(server_cpu))
    others = None if busy is None else max(0.0, busy - w.get("server_cpu_pct", 0.0))
    return (
        f"{r['server']:<8} {phase:<8} {r['n']:>5} {f(w.get('server_cpu_pct'), '6.1f')} "
        f"{f(w.get('server_cpu_us_per_packet'), '7.1f')} "
        f"{f(100 * w['on_time_share'] if 'on_time_share' in w else None, '7.2f')} "
        f"{f(late.get('p99'), '7.1f')} {f(w.get('packets_lost'), '6d')} "
        f"{f(c.get('ms_p50'), '7.0f')} {f(c.get('ms_p95'), '7.0f')} "
        f"{f(rss / 1024 if rss else None, '7.1f')} {f(per, '7.0f')} "
        f"{f(w.get('loadgen_cpu_pct'), '5.1f')} {f(others, '5.1f')} "
        f"{f((w.get('loadavg') or [None])[0], '5.2f')}  "
        f"{'BROKE: ' + '; '.join(r['broken']) if r.get('broken') else 'ok'}"
    )


def loss_row(loss: dict[str, Any]) -> str:
    """The listeners' drops and the gateway's repairs in a window (``--server loss``)."""
    repair = loss.get("repair_ms") or {}
    p50, p99 = repair.get("p50"), repair.get("p99")
    return (f"  loss {100 * loss['rate']:.1f} %: {loss['dropped']} dropped and NACKed, "
            f"{loss['repaired']} retransmissions in the window, {loss['unrepaired']} given up; "
            f"repair p50 {'-' if p50 is None else f'{p50:.1f}'} ms, "
            f"p99 {'-' if p99 is None else f'{p99:.1f}'} ms")


HEADER = (
    f"{'server':<8} {'window':<8} {'N':>5} {'CPU%':>6} {'µs/pkt':>7} {'ontime%':>7} "
    f"{'p99 ms':>7} {'lost':>6} {'conn50':>7} {'conn95':>7} {'RSS MB':>7} {'KB/str':>7} "
    f"{'gen%':>5} {'oth%':>5} {'load1':>5}  status"
)


def print_table(
    results: dict[str, list[dict[str, Any]]], speech: bool, server_cpu: int = 0
) -> None:
    print(HEADER)
    for rungs in results.values():
        for r in rungs:
            if r.get("silent"):
                print(row(r, "silent", server_cpu))
            if speech and r.get("speaking"):
                print(row(r, "speaking", server_cpu))


def ratios(results: dict[str, list[dict[str, Any]]], phase: str) -> list[dict[str, Any]]:
    gw = {r["n"]: r.get(phase) or {} for r in results.get("gateway", [])}
    base = {r["n"]: r.get(phase) or {} for r in results.get("baseline", [])}
    out = []
    for n in sorted(set(gw) & set(base)):
        g, b = gw[n], base[n]

        def ratio(key: str, g: dict = g, b: dict = b) -> float | None:
            gv, bv = g.get(key), b.get(key)
            return round(gv / bv, 3) if gv is not None and bv else None

        out.append({
            "n": n,
            "cpu_pct": ratio("server_cpu_pct"),
            "cpu_us_per_packet": ratio("server_cpu_us_per_packet"),
            "on_time_share": ratio("on_time_share"),
        })
    return out


def plot(results: dict[str, list[dict[str, Any]]], path: Path, speech: bool) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_cpu, ax_ok) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"gateway": "tab:blue", "baseline": "tab:red", "gateway-nomux": "tab:orange",
              "gateway-python": "tab:green", "gateway-loss": "tab:purple"}
    phases = ["speaking", "silent"] if speech else ["silent"]
    for kind, rungs in results.items():
        for phase in phases:
            pts = [(r["n"], r[phase]) for r in rungs if r.get(phase, {}).get("sessions_measured")]
            if not pts:
                continue
            ns = [n for n, _ in pts]
            line = "-o" if phase == phases[0] else ":x"
            label = f"{kind} ({phase})"
            ax_cpu.plot(ns, [w["server_cpu_pct"] for _, w in pts], line, color=styles[kind],
                        label=label)
            ax_ok.plot(ns, [100 * w["on_time_share"] for _, w in pts], line,
                       color=styles[kind], label=label)
    ax_cpu.axhline(100, color="grey", lw=0.8, ls="--")
    ax_cpu.set(xlabel="concurrent streams N", ylabel="server CPU % (one pinned core)",
               title="CPU vs streams")
    ax_ok.axhline(99.5, color="grey", lw=0.8, ls="--")
    ax_ok.set(xlabel="concurrent streams N", ylabel="frames on time (≤5 ms) %",
              title="On-time share vs streams")
    for ax in (ax_cpu, ax_ok):
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return matplotlib.__version__


def design_table(results: dict[str, list[dict[str, Any]]], speech: bool) -> list[dict[str, Any]]:
    """Per rung and window, the two UDP designs side by side (issue 16's figures)."""
    out = []
    for kind in DESIGNS:
        for r in results.get(kind, []):
            for phase in ("silent", "speaking") if speech else ("silent",):
                w = r.get(phase) or {}
                if not w:
                    continue
                rss = w.get("server_rss_kb")
                c = r.get("connect") or {}
                out.append({
                    "design": "shared socket + sendmmsg" if kind == "gateway"
                    else "socket per session",
                    "server": kind, "n": r["n"], "window": phase,
                    "on_time_pct": round(100 * w["on_time_share"], 2)
                    if "on_time_share" in w else None,
                    "p99_lateness_ms": (w.get("lateness_ms") or {}).get("p99"),
                    "cpu_pct": w.get("server_cpu_pct"),
                    "cpu_us_per_packet": w.get("server_cpu_us_per_packet"),
                    "rss_kb_per_stream": round((rss - r["idle_rss_kb"]) / r["n"], 1)
                    if rss and r.get("idle_rss_kb") else None,
                    "udp_sockets": r.get("udp_sockets_max"),
                    "connect_ms_p50": c.get("ms_p50"), "connect_ms_p95": c.get("ms_p95"),
                    "loadavg_1m": (w.get("loadavg") or [None])[0],
                    "broken": r.get("broken") or None,
                })
    return sorted(out, key=lambda d: (d["n"], d["window"], d["server"]))


def print_design_table(rows: list[dict[str, Any]]) -> None:
    def f(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, int | float) else "-"

    print(f"{'design':<26} {'N':>5} {'window':<8} {'ontime%':>7} {'p99 ms':>7} {'CPU%':>6} "
          f"{'µs/pkt':>7} {'KB/str':>7} {'UDP':>5} {'conn50':>7} {'load1':>5}  status")
    for d in rows:
        print(f"{d['design']:<26} {d['n']:>5} {d['window']:<8} {f(d['on_time_pct'], '7.2f')} "
              f"{f(d['p99_lateness_ms'], '7.1f')} {f(d['cpu_pct'], '6.1f')} "
              f"{f(d['cpu_us_per_packet'], '7.1f')} {f(d['rss_kb_per_stream'], '7.0f')} "
              f"{f(d['udp_sockets'], '5d')} {f(d['connect_ms_p50'], '7.0f')} "
              f"{f(d['loadavg_1m'], '5.2f')}  "
              f"{'BROKE: ' + '; '.join(d['broken']) if d['broken'] else 'ok'}")


def measure_floor(core: int, fanout: list[int], drain_core: int) -> dict[str, Any] | None:
    """bench/floor.py on the server's core, in a child process (pinned as the server is), with
    the floor at each of ``fanout``'s stream counts (its drainer on ``drain_core``)."""
    out = Path(tempfile.mkdtemp(prefix="bench-floor-")) / "floor.json"
    cmd = [sys.executable, "-m", "bench.floor", "--core", str(max(core, 0)), "--packets",
           "100000", "--repeat", "2", "--out", str(out),
           "--fanout", ",".join(str(n) for n in fanout), "--drain-core", str(drain_core)]
    if LOADGEN_PREFIX:  # --veth: the fan-out floor's drainer where the load generator is
        cmd += ["--drain-ip", LOADGEN_HOST, "--drain-netns", veth_floor.RX]
    print("measuring the machine's floor on the server's core ...", flush=True)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    print(done.stdout, end="", flush=True)
    if done.returncode != 0 or not out.exists():
        print(f"floor not measured: {done.stderr[-500:]}", flush=True)
        return None
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def what_gateway_speaks(mode: str, phrase_s: float) -> str:
    phrase = (f"a {phrase_s:g} s 440 Hz tone (24 kHz mono WAV voice), the same text queued "
              "back to back")
    if mode == "cache":
        return (f"{phrase}; every utterance a phrase cache hit (warmed once, loaded from "
                "--phrase-cache-dir): no synthesis, no encoding, only the media path")
    return (f"{phrase}; phrase cache off, so every frame is Opus-encoded by the gateway "
            "(synthesis itself is one memcpy of the WAV per utterance)")


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    ladder = sorted({int(x) for x in args.ladder.split(",") if x.strip()})
    kinds = {"both": SERVERS, "designs": DESIGNS, "paths": PATHS, "loss": LOSS}.get(args.server,
                                                                      (args.server,))
    floor = measure_floor(args.server_cpu, ladder, args.loadgen_cpu) if args.floor else None
    speech = not args.no_speech
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    discarded: list[dict[str, Any]] = []  # broken under contention, then measured again
    started = time.monotonic()
    mode = args.gateway_speech
    warm: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmpdir:
        tmp = Path(tmpdir)
        wav = tone_wav(tmp / "tone440.wav", args.phrase_s)
        gateway_extra: list[str] = list(args.gateway_arg)
        if any(k.startswith("gateway") for k in kinds) and speech:
            flags = gateway_flags()
            has_cache = "--phrase-cache-dir" in flags
            if mode == "auto":
                mode = "cache" if has_cache else "encode"
            if mode == "cache":
                if not has_cache:
                    raise SystemExit("this gateway has no --phrase-cache-dir: use "
                                     "--gateway-speech encode")
                cache_dir = tmp / "phrases"
                cache_dir.mkdir()
                print(f"warming the phrase cache ({args.phrase_s:g} s phrase) ...", flush=True)
                warm = await warm_phrase_cache(cache_dir, wav, args, tmp)
                gateway_extra += ["--phrase-cache-dir", str(cache_dir)]
            elif "--phrase-cache-mb" in flags:
                gateway_extra += ["--phrase-cache-mb", "0"]  # every frame encoded
        print(HEADER, flush=True)
        broken: set[str] = set()
        for n in ladder:  # rung by rung, each server in turn: a drifting machine moves all alike
            for kind in kinds:
                if kind in broken:
                    continue
                print(f"[{time.monotonic() - started:6.1f}s] {kind} N={n} ...", flush=True)
                for attempt in range(args.retries + 1):
                    rung = await run_rung(kind, n, args, wav, tmp, gateway_extra)
                    rung["broken"] = verdict(rung, args.min_on_time, speech)
                    rung["contended"] = contention(rung, args.server_cpu, speech)
                    rung["warnings"] = warnings(
                        rung, mode if kind.startswith("gateway") else None)
                    for warning in rung["warnings"]:
                        print(f"  warning: {warning}", flush=True)
                    for phase in ("silent", "speaking") if speech else ("silent",):
                        if rung.get(phase):
                            print(row(rung, phase, args.server_cpu), flush=True)
                            if (rung[phase].get("loss")):
                                print(loss_row(rung[phase]["loss"]), flush=True)
                    if not (rung["broken"] and rung["contended"]) or attempt == args.retries:
                        break
                    print(f"  other processes took {rung['contended']:.0f} % of the server's "
                          "core: measuring this N again", flush=True)
                    rung["retried"] = True
                    discarded.append(rung)
                results[kind].append(rung)
                if rung["broken"]:
                    broken.add(kind)
    # the floor again at the end: the VM drifts within a run; the ratios use both
    floor_after = measure_floor(args.server_cpu, ladder, args.loadgen_cpu) if args.floor else None
    summary = {
        kind: {
            "max_n_held": max((r["n"] for r in rungs if not r["broken"]), default=None),
            "broke_at": next((r["n"] for r in rungs if r["broken"]), None),
            "rss_silent": per_stream_rss(rungs, "silent"),
            "rss_speaking": per_stream_rss(rungs, "speaking") if speech else None,
        }
        for kind, rungs in results.items()
    }
    return {
        "floor": floor,
        "floor_after": floor_after,
        "what_speaks": {
            "gateway": what_gateway_speaks(mode, args.phrase_s) if speech else None,
            "gateway_silent_window": "the gateway's pre-encoded silence packet (no synthesis, "
            "no encoding): its media path alone",
            "baseline": "stock aiortc AudioStreamTrack subclass: 48 kHz s16 mono 440 Hz tone "
            "frames; aiortc resamples and Opus-encodes every frame, silence frames too",
        },
        "phrase_cache_warmup": warm,
        "settings": {
            "ladder": ladder, "window_s": args.window, "silent_window_s": args.silent_window,
            "batch": args.batch, "full_sessions": args.full, "speech": speech,
            "min_on_time": args.min_on_time, "on_time_ms": 5, "server_cpu": args.server_cpu,
            "gateway_speech": mode if speech else None, "phrase_s": args.phrase_s,
            "nice": args.nice,
            "loadgen_cpu": args.loadgen_cpu,
            "loss": args.loss if "gateway-loss" in kinds else None,
        },
        "duration_s": round(time.monotonic() - started, 1),
        "summary": summary,
        "designs": design_table(results, speech) if "gateway-nomux" in results else None,
        "ratios_gateway_over_baseline": {
            "speaking": ratios(results, "speaking") if speech else None,
            "silent": ratios(results, "silent"),
        },
        "results": results,
        "discarded_rungs": discarded,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", default=DEFAULT_LADDER, help="comma-separated N values")
    parser.add_argument("--window", type=float, default=10.0, help="speaking window, s")
    parser.add_argument("--silent-window", type=float, default=4.0,
                        help="window with all sessions connected, before speech (0: skip), s")
    parser.add_argument("--floor", action="store_true",
                        help="measure the machine's floor (bench/floor.py) on the server's core "
                        "first; print each gateway rung's µs/packet ÷ floor")
    parser.add_argument("--server", choices=[*SERVERS, *DESIGNS[1:], *PATHS[1:], *LOSS[1:],
                                             "both", "designs", "paths", "loss"],
                        default="both",
                        help="both: gateway and stock aiortc; designs: the gateway with its "
                        "shared UDP socket against one socket per session (--no-udp-mux); "
                        "loss: clean listeners against ones losing --loss and NACKing, RED on")
    parser.add_argument("--loss", type=float, default=0.02,
                        help="gateway-loss: the share of RTP each header-only listener drops "
                        "and NACKs")
    parser.add_argument("--batch", type=int, default=20, help="sessions connected at a time")
    parser.add_argument("--full", type=int, default=2, help="sessions that fully decode")
    parser.add_argument("--min-on-time", type=float, default=0.90,
                        help="a rung breaks below this on-time share")
    parser.add_argument("--gateway-speech", choices=["auto", "cache", "encode"], default="auto",
                        help="cache: every utterance a phrase cache hit (media path only); "
                        "encode: phrase cache off, every frame encoded; auto: cache when this "
                        "gateway has --phrase-cache-dir")
    parser.add_argument("--phrase-s", type=float, default=15.0,
                        help="length of the spoken phrase (a 440 Hz tone); each session queues "
                        "enough of them to outlast the measurement")
    parser.add_argument("--no-speech", action="store_true",
                        help="measure the silent window only (no speech requests)")
    parser.add_argument("--probe-overhead", type=int, default=10, metavar="K",
                        help="gateway: K sessions re-asked for speech after the window, to read "
                        "first PCM -> first RTP under load (0: off)")
    parser.add_argument("--server-cpu", type=int, default=0, help="core for the server (-1: any)")
    parser.add_argument("--loadgen-cpu", type=int, default=1,
                        help="core for the load generator (-1: any)")
    parser.add_argument("--rung-timeout", type=float, default=300.0)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="py-spy each server over its speaking window (the silent one "
                        "with --no-speech) at this N (collapsed stacks next to --out, a "
                        "summary in the JSON)")
    parser.add_argument("--profiler", choices=("py-spy", "perf"), default="py-spy",
                        help="--profile's tool: perf samples native code (the interpreter, "
                        "libpython, libsrtp, the kernel; bench/perf_profile.py)")
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness increment for the server and load generator processes "
                        "(negative, as root: favour them over other work on a shared machine)")
    parser.add_argument("--retries", type=int, default=1,
                        help="measure a broken N again when other processes took > 20 %% of "
                        "the server's core meanwhile")
    parser.add_argument("--srtp-profile", choices=("any", "cm", "gcm"), default="any",
                        help="the DTLS-SRTP profile the load generator offers (bench.loadgen): "
                        "cm is what Chromium and the gateway settle on, any is aiortc's choice "
                        "(AES-GCM)")
    parser.add_argument("--gateway-arg", action="append", default=[], metavar="ARG",
                        help="an extra flag for every gateway rung (repeat; e.g. "
                        "--gateway-arg=--stall-warn-ms=20)")
    parser.add_argument("--veth", action="store_true",
                        help="the server and the load generator in two network namespaces "
                        "joined by a veth pair, RPS handing each end's receive path to its "
                        "process's core, as NICs do (bench/veth_floor.py; root): on loopback "
                        "the receivers' kernel work runs on the sender's core")
    parser.add_argument("--out", default=str(RESULTS / "load.json"))
    parser.add_argument("--plot", default=None, help="PNG path (default: next to --out)")
    args = parser.parse_args(argv)
    if os.cpu_count() and max(args.server_cpu, args.loadgen_cpu) >= os.cpu_count():
        parser.error(f"only {os.cpu_count()} CPUs (a negative CPU: not pinned)")
    if shutil.which("taskset") is None:
        print("note: no taskset here: processes are not pinned to cores", file=sys.stderr)
    global NICE, HOST, LOADGEN_HOST
    NICE = args.nice
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)  # (each rung keeps its server's log there)
    with contextlib.ExitStack() as veth:
        if args.veth:
            if not veth_floor.available():
                parser.error("--veth needs root and iproute2's ip")
            veth.enter_context(veth_floor.veth_pair(max(args.loadgen_cpu, 0),
                                                    max(args.server_cpu, 0)))
            veth.enter_context(veth_floor.sending_from())
            HOST, LOADGEN_HOST = veth_floor.TX_IP, veth_floor.RX_IP
            LOADGEN_PREFIX[:] = netns_exec(veth_floor.RX)
        data = asyncio.run(main_async(args))
    data["settings"]["veth"] = args.veth
    png = Path(args.plot) if args.plot else out.with_suffix(".png")
    data["matplotlib"] = plot(data["results"], png, data["settings"]["speech"])
    data["plot"] = str(png) if data["matplotlib"] else None
    data = {"benchmark": "load", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine(), "loadavg_end": procstats.load_average(), **data}
    out.write_text(json.dumps(data, indent=1))
    print()
    print_table(data["results"], data["settings"]["speech"], args.server_cpu)
    if data.get("designs"):
        print()
        print_design_table(data["designs"])
    for phase in ("speaking", "silent"):
        for r in data["ratios_gateway_over_baseline"].get(phase) or []:
            print(f"gateway/baseline ({phase}) N={r['n']}: CPU {r['cpu_pct']}, "
                  f"µs/pkt {r['cpu_us_per_packet']}, on-time {r['on_time_share']}")
    for rung in data["results"].get("gateway") or []:
        probe = rung.get("server_overhead_ms") or {}
        if (probe.get("first_pcm_to_first_rtp") or {}).get("median") is not None:
            parts = [f"{name} median {probe[key]['median']:.1f} ms (max {probe[key]['max']:.1f})"
                     for name, key in (("first PCM -> RTP sent", "first_pcm_to_first_rtp"),
                                       ("processing", "first_pcm_to_first_frame_queued"),
                                       ("slot wait", "frame_queued_to_sent"))
                     if (probe.get(key) or {}).get("median") is not None]
            print(f"gateway overhead at N={rung['n']}: " + "; ".join(parts))
    floors = [f for f in (data.get("floor"), data.get("floor_after")) if f]
    for when, floor in zip(("before", "after"), floors, strict=False):
        best = floor["best_us"]
        print(f"floor {when} the ladder, core {floor['core']}: {best['floor']:.2f} µs/packet "
              f"(sendmmsg {best.get('sendmmsg', best['sendto']):.2f} + SRTP "
              f"{best['srtp_direct']:.2f}); send step alone: python "
              f"{best.get('path_python', 0):.2f}, compiled {best.get('path_compiled', 0):.2f}; "
              f"load average {floor['loadavg'][0]:.2f}")
        for count, split in (floor.get("fanout_us") or {}).items():
            print(f"  at {count} destinations ({split.get('how', 'python')}): "
                  f"{split['floor_fanout']:.2f} µs/packet (sendmmsg "
                  f"{split['sendmmsg_fanout']:.2f} + SRTP {split['srtp_fanout']:.2f})"
                  + (f"; with the gateway's C SRTP {split['floor_fanout_srtp_c']:.2f} (SRTP "
                     f"{split['srtp_fanout_srtp_c']:.2f})" if "floor_fanout_srtp_c" in split
                     else ""))
    if floors:
        print("each rung ÷ the floor, and ÷ the floor at its fan-out (the mean of the "
              "measurements before and after; target ≤ 2.0"
              + ("; the fan-out floors over the veth pair, the first on loopback)"
                 if data["settings"].get("veth") else "):"))
    for kind, rungs in data["results"].items():
        for rung in rungs:
            for phase in ("silent", "speaking"):
                us = (rung.get(phase) or {}).get("server_cpu_us_per_packet")
                one = [f["best_us"]["floor"] for f in floors]
                at_ns = [f["fanout_us"][str(rung["n"])] for f in floors
                         if str(rung["n"]) in (f.get("fanout_us") or {})]
                at_n = [split["floor_fanout"] for split in at_ns]
                own = [split["floor_fanout_srtp_c"] for split in at_ns
                       if "floor_fanout_srtp_c" in split]
                if not us or not one:
                    continue
                beside = (f"; {us / statistics.mean(at_n):.2f}x the floor at {rung['n']} "
                          "destinations" if at_n else "")
                if own:
                    beside += f" ({us / statistics.mean(own):.2f}x with the gateway's C SRTP)"
                print(f"  {kind} N={rung['n']} {phase}: {us:.1f} µs/packet = "
                      f"{us / statistics.mean(one):.2f}x the floor{beside}")
    for kind, s in data["summary"].items():
        print(f"{kind}: held up to N={s['max_n_held']}, broke at N={s['broke_at']}; "
              f"RSS per added stream {s['rss_silent']['kb_per_stream']} KB (silent), "
              f"{(s['rss_speaking'] or {}).get('kb_per_stream')} KB (speaking)")
    print(f"written {out}" + (f" and {png}" if data["plot"] else " (no matplotlib: no plot)"))
    return data


if __name__ == "__main__":
    main()
