"""Benchmark: the event loop's CPU per received talker datagram, the receive fast path
(aiortc_compat/rx_fast.py) against aiortc's receive task, in the same run.

``flock -x /tmp/cpu.lock python -m bench.rx_cost`` (a table printed, JSON in bench/results/).
An in-process duplex gateway (the echo agent, tone voices, ``--turn-detector silence``), its
event loop's thread pinned to CPU 0; ``RX_COST_TALKERS`` (default 8) aiortc talkers in a load
generator process of their own pinned to CPU 1 (``python -m bench.rx_cost --loadgen``), each
microphone sending Opus at 50 packets/s (silence: the VAD's gate skips it, so what is measured
is the packet path, SRTP to playout, not the VAD model). Once every talker is connected and
streaming, windows of ``RX_COST_WINDOW_S`` (10 s) alternate ABBA, ``RX_COST_PAIRS`` (2) times:
fast path on, off, off, on, ... -- toggled on the same sessions (``receive_rtp_directly`` /
``stop_receiving_directly``), so both share the machine's state. Per window: the loop thread's
CPU (``time.thread_time`` read on the loop), the datagrams the uplinks received, hence µs of
loop CPU per received datagram and % of a core per talker. Before the gateway starts and after
its windows, the same loop measures the machine's floor, a bare wake-up per datagram at the same
rate (bench/wake_floor.py), printed beside each figure (÷ the floor, µs above it). On a
gateway without the fast path (main before issue 28's receive lever) every window is aiortc's:
the same bench copied there measures the base. ``RX_COST_PROFILE=1`` prints a cProfile of each
window (slower); ``RX_COST_PROFILE_OUT=PREFIX`` also writes its raw stats to
``PREFIX.<mode>.<ns>``. Each window
also says how often the shared ticker fired per datagram (``ticker_fires_per_datagram``) and,
with ``RX_COST_COUNT_ITERATIONS=1``, the loop's iterations per datagram (a counting wrapper
around its selector: a Python call more per iteration). ``RX_COST_RTCP_FAST=0`` turns the
session's SRTCP fast path off (``--no-rtcp-fast-path``; the RTP toggle above leaves it as set).
``RX_COST_LOOP=uvloop`` runs the gateway (and the floor) on uvloop, as ``gateway.cli`` does when
it is installed (``make run``'s ``speed`` extra); the default is asyncio's own loop.
``RX_COST_COALESCE_MS=10`` runs the gateway with ``--coalesce-ms 10`` (the sockets read at the
ticks of a 10 ms grid while it is busy; set at start, so compare runs, not windows);
``RX_COST_PACK_BELOW=0`` with ``--pack-below 0`` (the talkers' streams spread over the 2.5 ms
grid, every datagram read when it comes; unset: the gateway's default, packed). Each window
also says what the talkers' receive paths played meanwhile (concealed, late, underruns,
dropped) and their mean added playout delay and jitter buffer target at its end.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from bench import wake_floor
from bench.common import write_results
from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.api.routes import REGISTRY
from gateway.config import GatewayConfig
from gateway.media.ticker import _TICKERS
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

REPO = Path(__file__).resolve().parent.parent
TALKERS = int(os.environ.get("RX_COST_TALKERS", "8"))
WINDOW_S = float(os.environ.get("RX_COST_WINDOW_S", "10"))
PAIRS = int(os.environ.get("RX_COST_PAIRS", "2"))
WARMUP_S = 3.0
HAS_FAST = hasattr(aiortc_compat, "receive_rtp_directly")
ITERATIONS = [0]  # the loop's selector calls (RX_COST_COUNT_ITERATIONS=1)
COALESCE_MS = float(os.environ.get("RX_COST_COALESCE_MS", "0"))  # --coalesce-ms (0: off)
#: --pack-below (unset: the gateway's default; 0: off, every datagram read when it comes)
PACK_BELOW = int(os.environ["RX_COST_PACK_BELOW"]) if "RX_COST_PACK_BELOW" in os.environ else None
LOOP = os.environ.get("RX_COST_LOOP", "asyncio")  # or "uvloop": the gateway's loop in production


def count_iterations(loop: asyncio.AbstractEventLoop) -> None:
    """Count the loop's iterations: one selector call each."""
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def counted(timeout: float | None = None) -> Any:
        ITERATIONS[0] += 1
        return select(timeout)

    selector.select = counted


# --- the load generator (its own process) ----------------------------------------------------


async def loadgen(url: str, talkers: int, seconds: float) -> None:
    import aiohttp
    import numpy as np

    from gateway.client.peer import GatewayClient
    from gateway.testing.mic_track import RecordedMic

    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    async with aiohttp.ClientSession() as http:
        clients = [GatewayClient(url, http) for _ in range(talkers)]
        for client in clients:
            await client.connect(mic=RecordedMic(np.zeros(0, dtype=np.int16), 24_000))
        print("READY", flush=True)
        try:
            await asyncio.sleep(seconds)
        finally:
            for client in clients:
                await client.close()


# --- the gateway side --------------------------------------------------------------------------


def voices() -> VoiceRegistry:
    return VoiceRegistry([ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0,
                                          sample_rate=24_000)])


def set_fast(registry: Any, on: bool) -> int:
    """The fast path on or off for every talking session; returns the sessions that have it."""
    n = 0
    for session in registry:
        leg = session.webrtc
        if leg.uplink is None:
            continue
        receiver = leg._transceiver.receiver
        if on:
            if leg.rx_fast is None:
                leg.rx_fast = aiortc_compat.receive_rtp_directly(receiver)
            n += leg.rx_fast is not None
        else:
            aiortc_compat.stop_receiving_directly(receiver.transport)
            leg.rx_fast = None
    return n


def received(registry: Any) -> int:
    return sum(s.webrtc.uplink.stats.received for s in registry if s.webrtc.uplink is not None)


QUALITY = ("concealed", "late", "underruns", "dropped")  # summed over the uplinks, per window


def uplink_quality(registry: Any) -> dict[str, float]:
    """What the talkers' receive paths played: the counters of ``QUALITY`` summed, and the
    mean added playout delay and jitter buffer target (what a coarser read costs in latency)."""
    stats = [s.webrtc.uplink.stats for s in registry if s.webrtc.uplink is not None]
    out: dict[str, float] = {k: sum(getattr(st, k, 0) for st in stats) for k in QUALITY}
    delays = [d for st in stats if (d := getattr(st, "playout_delay_ms", None)) is not None]
    out["playout_delay_ms"] = round(statistics.mean(delays), 2) if delays else -1.0
    out["target_frames"] = round(statistics.mean(st.target_frames for st in stats), 2) \
        if stats else -1.0
    return out


def thread_ticks() -> tuple[int, int]:
    """The calling thread's user and system CPU, in clock ticks (/proc: 10 ms each)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]), int(fields[12])
    except OSError:
        return 0, 0


async def window(registry: Any, mode: str) -> dict[str, Any]:
    fast = set_fast(registry, mode == "fast") if HAS_FAST else 0
    await asyncio.sleep(0.5)  # aiortc's queue drained, the new path settled
    print(f"WINDOW {mode}", flush=True)  # (a profiler attached from outside can start here)
    cpu0, proc0, n0, t0 = time.thread_time(), time.process_time(), received(registry), \
        time.monotonic()
    user0, sys0 = thread_ticks()
    quality0 = uplink_quality(registry)
    ticker = _TICKERS.get(asyncio.get_running_loop())
    fires0, iterations0 = (ticker.fired if ticker is not None else 0), ITERATIONS[0]
    profile = None
    if os.environ.get("RX_COST_PROFILE"):  # a deterministic profile of the window (slower)
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    await asyncio.sleep(WINDOW_S)
    if profile is not None:
        import pstats

        profile.disable()
        if out := os.environ.get("RX_COST_PROFILE_OUT"):  # the raw stats too, for pstats
            profile.dump_stats(f"{out}.{mode}.{time.time_ns()}")
        print(f"--- profile of a {mode} window (tottime)")
        pstats.Stats(profile).sort_stats("tottime").print_stats(45)
    cpu, proc, n, wall = (time.thread_time() - cpu0, time.process_time() - proc0,
                          received(registry) - n0, time.monotonic() - t0)
    user, system = thread_ticks()
    quality = uplink_quality(registry)
    fires = (ticker.fired if ticker is not None else 0) - fires0
    iterations = ITERATIONS[0] - iterations0
    tick = os.sysconf("SC_CLK_TCK")
    return {"mode": mode, "fast_sessions": fast, "datagrams": n, "wall_s": round(wall, 2),
            "loop_cpu_s": round(cpu, 4), "process_cpu_s": round(proc, 4),
            "loop_user_s": (user - user0) / tick, "loop_system_s": (system - sys0) / tick,
            "loop_us_per_datagram": round(1e6 * cpu / n, 2) if n else None,
            "loop_pct": round(100 * cpu / wall, 2),
            "loop_pct_per_talker": round(100 * cpu / wall / TALKERS, 2),
            "ticker_fires_per_datagram": round(fires / n, 3) if n else None,
            "loop_iterations_per_datagram": round(iterations / n, 3) if n and iterations
            else None,
            "loadavg": os.getloadavg()[0],
            **{k: quality[k] - quality0[k] for k in QUALITY},
            "playout_delay_ms": quality["playout_delay_ms"],
            "target_frames": quality["target_frames"]}


async def run() -> dict[str, Any]:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(0, {0})  # the loop's thread (and threads started from it)
    extra: dict[str, Any] = {}
    if os.environ.get("RX_COST_RTCP_FAST") == "0":  # the SRTCP fast path off (rtcp_fast.py)
        extra["rtcp_fast_path"] = False
    if COALESCE_MS:  # --coalesce-ms
        extra["coalesce_ms"] = COALESCE_MS
    if PACK_BELOW is not None:  # --pack-below
        extra["pack_below"] = PACK_BELOW
    floors = [await wake_floor.measure(TALKERS, WINDOW_S)]  # the machine's, before the gateway
    print(f"floor   a bare wake-up per datagram (bench.wake_floor, {TALKERS} streams): "
          f"{floors[0]['loop_us_per_datagram']} µs", flush=True)
    config = dataclasses.replace(
        GatewayConfig(host="127.0.0.1", port=0, ice_hosts=("127.0.0.1",)),
        duplex=True, reply_voice="tone", turn_detector="silence",
        max_sessions=TALKERS + 4, connect_timeout_s=60.0, **extra)
    app = create_app(config, voices())
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    registry = app[REGISTRY]
    registry.gc.freeze()
    if os.environ.get("RX_COST_COUNT_ITERATIONS") and LOOP != "uvloop":  # (uvloop's is C)
        count_iterations(asyncio.get_running_loop())
    modes = []
    for i in range(PAIRS):
        modes += ["fast", "aiortc"] if i % 2 == 0 else ["aiortc", "fast"]
    seconds = WARMUP_S + len(modes) * (WINDOW_S + 1.0) + 30
    cmd = [sys.executable, "-m", "bench.rx_cost", "--loadgen", "--url", url,
           "--talkers", str(TALKERS), "--seconds", str(seconds)]
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    windows: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(120):
            while True:
                line = (await proc.stdout.readline()).decode(errors="replace")
                if not line:
                    raise SystemExit("the load generator ended before READY")
                if line.startswith("READY"):
                    break
        await asyncio.sleep(WARMUP_S)
        talking = sum(1 for s in registry if s.webrtc.uplink is not None)
        assert talking == TALKERS, f"{talking} talking sessions of {TALKERS}"
        for mode in modes:
            if not HAS_FAST:
                mode = "aiortc"
            w = await window(registry, mode)
            windows.append(w)
            print(f"{w['mode']:<7} fast sessions {w['fast_sessions']:>2}  datagrams "
                  f"{w['datagrams']:>6}  loop {w['loop_pct']:>6.2f} % of a core "
                  f"({w['loop_pct_per_talker']:.2f} % a talker)  "
                  f"{w['loop_us_per_datagram']:>7.2f} µs/datagram (user {w['loop_user_s']:.2f} s, "
                  f"system {w['loop_system_s']:.2f} s)  fires {w['ticker_fires_per_datagram']}  "
                  f"iterations {w['loop_iterations_per_datagram']}  load1 {w['loadavg']:.2f}  "
                  f"uplinks: concealed {w['concealed']} late {w['late']} underruns "
                  f"{w['underruns']} dropped {w['dropped']} playout delay "
                  f"{w['playout_delay_ms']} ms target {w['target_frames']} frames",
                  flush=True)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await runner.cleanup()
        aiortc_compat.restrict_ice_hosts(None)
    if windows:  # and after it, on the same loop (the machine drifts within a run)
        floors.append(await wake_floor.measure(TALKERS, WINDOW_S))
        print(f"floor   after the windows: {floors[1]['loop_us_per_datagram']} µs", flush=True)
    floor_us = sum(f["loop_cpu_s"] for f in floors) * 1e6 / sum(f["datagrams"] for f in floors)

    def pooled(mode: str) -> dict[str, Any] | None:
        ws = [w for w in windows if w["mode"] == mode]
        if not ws:
            return None
        cpu = sum(w["loop_cpu_s"] for w in ws)
        n = sum(w["datagrams"] for w in ws)
        wall = sum(w["wall_s"] for w in ws)
        return {"windows": len(ws), "datagrams": n,
                "loop_us_per_datagram": round(1e6 * cpu / n, 2),
                "loop_pct_per_talker": round(100 * cpu / wall / TALKERS, 2),
                "per_window_us": [w["loop_us_per_datagram"] for w in ws],
                "median_us": statistics.median(w["loop_us_per_datagram"] for w in ws)}

    result = {"talkers": TALKERS, "window_s": WINDOW_S, "has_fast_path": HAS_FAST,
              "coalesce_ms": COALESCE_MS, "pack_below": PACK_BELOW,
              "windows": windows, "fast": pooled("fast"), "aiortc": pooled("aiortc"),
              "floor": {"runs": floors, "loop_us_per_datagram": round(floor_us, 2)}}
    for mode in ("fast", "aiortc"):
        if (p := result[mode]) is not None:
            p["above_floor_us"] = round(p["loop_us_per_datagram"] - floor_us, 2)
            p["x_floor"] = round(p["loop_us_per_datagram"] / floor_us, 2)
            print(f"{mode:<7} {p['loop_us_per_datagram']} µs/datagram = {p['x_floor']}x the "
                  f"floor ({floor_us:.1f} µs), {p['above_floor_us']} µs above it")
    fast, base = result["fast"], result["aiortc"]
    if fast and base:
        saved = base["loop_us_per_datagram"] - fast["loop_us_per_datagram"]
        result["saved_us_per_datagram"] = round(saved, 2)
        result["saved_share"] = round(saved / base["loop_us_per_datagram"], 3)
        print(f"pooled: aiortc {base['loop_us_per_datagram']} µs/datagram "
              f"({base['loop_pct_per_talker']} % a talker), fast {fast['loop_us_per_datagram']} "
              f"µs/datagram ({fast['loop_pct_per_talker']} % a talker): "
              f"{saved:.2f} µs saved ({100 * saved / base['loop_us_per_datagram']:.1f} %)")
    elif base:
        print(f"pooled: aiortc {base['loop_us_per_datagram']} µs/datagram "
              f"({base['loop_pct_per_talker']} % a talker)")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loadgen", action="store_true")
    parser.add_argument("--url")
    parser.add_argument("--talkers", type=int, default=TALKERS)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    if args.loadgen:
        asyncio.run(loadgen(args.url, args.talkers, args.seconds))
        return
    if LOOP == "uvloop":  # as ``gateway.cli`` runs the gateway when uvloop is installed
        import uvloop

        result = uvloop.run(run())
    else:
        result = asyncio.run(run())
    result["event_loop"] = LOOP
    print(f"wrote {write_results('rx_cost', result, default=str)}")


if __name__ == "__main__":
    main()
