"""Phases ``density``, ``baseline`` and ``flush`` of bench/http_stream.py (see its docstring).

Per configuration and per N of the ladder: a fresh server process pinned to
``--server-cpu``, one warm-up request (so first-request code paths are not counted as
per-stream memory), the idle RSS, then bench/http_loadgen.py pinned to ``--loadgen-cpu`` for
the N live streams. A run whose server core was more than 20 % busy with other processes in the
window (a shared machine) is measured again, up to ``--retries`` times, and the less disturbed
run is kept (both are in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import procstats
from bench.common import RESULTS, free_port, wait_healthy
from bench.http_wire import first_audio
from bench.load import (
    REPO,
    _child_setup,
    gateway_flags,
    pinned,
    profile_top,
    spawn_server,
    stop,
    tail,
    tone_wav,
)

DENSITY_TEXT = "The density benchmark's long tone."
VOICE = "bench"
ROUTE = {"frames": ("/v1/speech/stream", "frames"), "ogg": ("/v1/audio/speech", "ogg")}
CONTENDED_PCT = 20.0
Log = Callable[[str], None]


def stream_body(fmt: str, pace: str) -> dict[str, Any]:
    if fmt == "frames":
        return {"text": DENSITY_TEXT, "voice": VOICE, "pace": pace}
    return {"model": "tts-1", "input": DENSITY_TEXT, "voice": VOICE, "response_format": "opus",
            "pace": pace}


@functools.cache
def _has_drain_timeout() -> bool:
    return "--drain-timeout" in gateway_flags()


def gateway_cmd(port: int, wav: Path, cache_dir: Path, args: argparse.Namespace,
                flush: str = "adaptive") -> list[str]:
    # SIGTERM drains playing speech first where the gateway can; nothing plays by then
    drain = ["--drain-timeout", "2"] if _has_drain_timeout() else []
    return [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
            "--ice-hosts", "127.0.0.1", "--log-level", "WARNING", "--voice", f"{VOICE}=wav:{wav}",
            "--phrase-cache-dir", str(cache_dir), "--http-flush", flush,
            "--live-lead-ms", str(args.lead_ms), *drain]


def probe_cmd(port: int, wav: Path, cache_dir: Path, args: argparse.Namespace,
              cadence_ms: float) -> list[str]:
    """The gateway with another live write cadence (``--live-write-ms``)."""
    return [*gateway_cmd(port, wav, cache_dir, args), "--live-write-ms", f"{cadence_ms:g}"]


def baseline_cmd(port: int, cache_dir: Path, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "bench.http_baseline_server", "--host", "127.0.0.1",
            "--port", str(port), "--phrase-dir", str(cache_dir), "--lead-ms", str(args.lead_ms)]


async def warm_phrase_cache(wav: Path, cache_dir: Path, args: argparse.Namespace,
                            tmp: Path) -> dict[str, Any]:
    """Speak the tone once (asap) through a gateway persisting its phrase cache to
    ``cache_dir``; its shutdown waits for the write."""
    port = free_port()
    logf = tmp / "warm.log"
    server = spawn_server(gateway_cmd(port, wav, cache_dir, args), logf)
    started = time.monotonic()
    try:
        await wait_healthy(f"http://127.0.0.1:{port}", server, lambda: tail(logf), 60)
        path, kind = ROUTE[args.format]
        row = await first_audio("127.0.0.1", port, path, stream_body(args.format, "asap"), kind,
                                timeout=args.phrase_s + 60)
        await asyncio.sleep(0.3)  # the phrase is stored when its utterance is DONE
    finally:
        stop(server)
    files = list(cache_dir.glob("*.vgp"))
    if not row["ended"] or not files:
        raise RuntimeError(f"phrase cache warm-up failed: {row}, {len(files)} files, "
                           f"{tail(logf)}")
    return {"seconds": round(time.monotonic() - started, 2), "frames": row["units"],
            "files": len(files), "bytes": sum(f.stat().st_size for f in files)}


async def run_density(name: str, n: int, cmd: list[str], args: argparse.Namespace, tmp: Path,
                      profile: bool = False) -> dict[str, Any]:
    """One server process pinned to its core, one load generator pinned to the other."""
    port = int(cmd[cmd.index("--port") + 1])
    logf, out = tmp / f"{name}-{n}.log", tmp / f"{name}-{n}.json"
    ramp = args.ramp_s if args.ramp_s is not None else max(0.5, n / 200)
    result: dict[str, Any] = {"name": name, "n": n, "loadavg_before": procstats.load_average()}
    server = spawn_server(pinned(cmd, args.server_cpu), logf)
    try:
        await wait_healthy(f"http://127.0.0.1:{port}", server, lambda: tail(logf), 60)
        path, kind = ROUTE[args.format]
        warm = await first_audio("127.0.0.1", port, path, stream_body(args.format, "asap"), kind,
                                 timeout=args.phrase_s + 60)
        result["warm_request_first_audio_ms"] = warm["first_audio_ms"]
        await asyncio.sleep(0.5 if args.quick else 1.0)
        result["idle_rss_kb"] = procstats.rss_kb(server.pid)
        gen_cmd = [
            sys.executable, "-m", "bench.http_loadgen", "--port", str(port), "--path", path,
            "--kind", kind, "--body", json.dumps(stream_body(args.format, "live")),
            "--streams", str(n), "--batch", str(args.batch), "--ramp-s", str(ramp),
            "--settle-s", str(args.settle_s), "--window-s", str(args.seconds),
            "--lead-ms", str(args.lead_ms), "--server-pid", str(server.pid),
            "--server-cpu", str(args.server_cpu), "--out", str(out),
        ]
        gen = await asyncio.create_subprocess_exec(
            *pinned(gen_cmd, args.loadgen_cpu), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=REPO, preexec_fn=_child_setup,
        )
        spy = asyncio.create_task(py_spy(server.pid, ramp, args, name)) if profile else None
        try:
            output, _ = await asyncio.wait_for(gen.communicate(),
                                               ramp + args.settle_s + args.seconds + 60)
        except TimeoutError:
            gen.kill()
            await gen.wait()
            output = b"load generator timed out"
        if spy is not None:
            result["profile"] = await spy
        if gen.returncode != 0 or not out.exists():
            result["error"] = output.decode(errors="replace")[-1500:]
            return result
        result.update(json.loads(out.read_text()))
        if server.poll() is not None:
            result["error"] = f"server died: {tail(logf)}"
    finally:
        stop(server)
        result["server_log_tail"] = tail(logf, 600) or None
    rss = (result.get("server_rss_kb") or {}).get("max")
    if rss and result.get("idle_rss_kb"):
        added = rss - result["idle_rss_kb"]
        result["rss_added_mb"] = round(added / 1024, 2)
        result["rss_added_kb_per_stream"] = round(added / n, 1)
    if result.get("frames_per_s"):
        result["server_cpu_us_per_frame"] = round(
            result["server_cpu_pct"] / 100 / result["frames_per_s"] * 1e6, 2)
    busy = result.get("server_core_busy_pct")
    if busy is not None:
        result["others_on_server_core_pct"] = round(max(0.0, busy - result["server_cpu_pct"]), 1)
    return result


async def py_spy(pid: int, ramp: float, args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Record the server over the load generator's window: collapsed stacks (what
    flamegraph.pl, inferno and speedscope read) and a per-function summary."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return {"error": "py-spy is not installed (pip install py-spy)"}
    await asyncio.sleep(ramp + args.settle_s + 1.5)
    raw = RESULTS / f"http_stream-profile-{name}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    cmd = [spy, "record", "--pid", str(pid), "--duration", str(max(2, int(args.seconds) - 2)),
           "--rate", "100", "--nonblocking", "--format", "raw", "-o", str(raw)]
    proc = await asyncio.create_subprocess_exec(*pinned(cmd, args.loadgen_cpu),
                                                stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0 or not raw.exists():
        return {"error": err.decode(errors="replace")[-500:]}
    return {"raw": str(raw), **profile_top(raw)}


def contended(result: dict[str, Any]) -> bool:
    return (result.get("others_on_server_core_pct") or 0.0) > CONTENDED_PCT


async def density_phases(phases: list[str], args: argparse.Namespace, log: Log) -> dict:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmpdir:
        tmp = Path(tmpdir)
        wav = tone_wav(tmp / "tone440.wav", args.phrase_s)
        cache_dir = tmp / "phrases"
        cache_dir.mkdir()
        log(f"warming the phrase cache: a {args.phrase_s:g} s tone, spoken once")
        out["phrase_cache_warmup"] = await warm_phrase_cache(wav, cache_dir, args, tmp)
        configs: list[tuple[str, Callable[[int], list[str]]]] = []
        if "density" in phases or "flush" in phases:
            configs.append(("gateway-adaptive", lambda p: gateway_cmd(p, wav, cache_dir, args)))
        if "baseline" in phases:
            configs.append(("baseline", lambda p: baseline_cmd(p, cache_dir, args)))
        if "flush" in phases:
            configs.append(("gateway-frame",
                            lambda p: gateway_cmd(p, wav, cache_dir, args, flush="frame")))
        results: dict[str, dict[str, Any]] = {name: {} for name, _ in configs}
        discarded: list[dict[str, Any]] = []
        for n in args.ladder:  # every configuration at one N before the next N
            for name, make in configs:
                log(f"density: {name}, {n} live streams, {args.seconds:g} s window")
                for attempt in range(args.retries + 1):
                    r = await run_density(name, n, make(free_port()), args, tmp)
                    log(summary_line(r, n))
                    best = results[name].get(str(n))
                    if best is None or (r.get("others_on_server_core_pct") or 0) < (
                            best.get("others_on_server_core_pct") or 0):
                        if best is not None:
                            discarded.append(best)
                        results[name][str(n)] = r
                    else:
                        discarded.append(r)
                    if not contended(r) or attempt == args.retries:
                        break
                    log(f"  other processes took {r['others_on_server_core_pct']} % of the "
                        "server's core: measuring again")
        for cadence in args.cadence_probe:
            n, name = max(args.ladder), f"probe-write-{cadence:g}ms"
            log(f"cadence probe: {name}, {n} live streams")
            r = await run_density(name, n, probe_cmd(free_port(), wav, cache_dir, args, cadence),
                                  args, tmp)
            log(summary_line(r, n))
            results.setdefault(name, {})[str(n)] = r
        if args.profile:
            n = max(args.ladder)
            log(f"profile: gateway-adaptive again at N={n}, under py-spy")
            prof = await run_density("profiled", n, gateway_cmd(free_port(), wav, cache_dir,
                                                                args), args, tmp, profile=True)
            out["profile"] = {"n": n, "run": {k: prof.get(k) for k in (
                "server_cpu_pct", "streams_ran", "loadgen_cpu_pct", "lateness")},
                **(prof.get("profile") or {})}
        out["density"] = results
        out["discarded_runs"] = discarded
    return out


def summary_line(r: dict[str, Any], n: int) -> str:
    late = r.get("lateness") or {}
    line = (f"  {r['name']} N={n}: CPU {r.get('server_cpu_pct')} % (others on its core "
            f"{r.get('others_on_server_core_pct')} %), ran {r.get('streams_ran')}/{n}, "
            f"RSS +{r.get('rss_added_mb')} MB, late p50 {late.get('p50_ms')} p99 "
            f"{late.get('p99_ms')} ms, loadgen CPU {r.get('loadgen_cpu_pct')} %")
    return line + (f", ERROR {r['error'][-300:]}" if r.get("error") else "")


def ratios(density: dict[str, Any]) -> dict[str, Any]:
    """gateway (adaptive) / baseline per N, for CPU, µs per frame and RSS."""
    g_all, b_all = density.get("gateway-adaptive") or {}, density.get("baseline") or {}
    out = {}
    for n in sorted(set(g_all) & set(b_all), key=int):
        g, b = g_all[n], b_all[n]

        def ratio(key: str, g: dict = g, b: dict = b) -> float | None:
            gv, bv = g.get(key), b.get(key)
            return round(gv / bv, 3) if isinstance(gv, int | float) and bv else None

        out[n] = {k: ratio(k) for k in ("server_cpu_pct", "server_cpu_us_per_frame",
                                         "rss_added_mb", "idle_rss_kb")}
        gl, bl = g.get("lateness") or {}, b.get("lateness") or {}
        out[n]["late_p99_ms"] = [gl.get("p99_ms"), bl.get("p99_ms")]
    return out
