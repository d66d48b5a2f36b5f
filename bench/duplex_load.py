"""Benchmark: talking sessions do not disturb the pacing of listening sessions (ASR off the loop;
measured lateness). ``python -m bench.duplex_load`` (a table printed, JSON in bench/results/);
it was a non-strict xfail test until 2026-12-02: a speed figure, so it belongs here. 10 talking
and 200 listening sessions on a machine of 4 cores or more; on 2 cores, 4 and 100 (why below).
``DUPLEX_LOAD_TALKERS`` / ``DUPLEX_LOAD_LISTENERS`` override; ``DUPLEX_LOAD_TURN_DETECTOR``
(default ``smart-turn``: the turn model's process busy too) or ``silence``;
``DUPLEX_LOAD_RX_FAST_PATH=0``: the talkers' SRTP through aiortc's receive task instead of the
receive fast path (docs/density.md), to compare in one tree.

The gateway runs in this process (``start_gateway`` below, as the tests' fixture: duplex on,
real Whisper tiny.en, Silero VAD, the echo agent, tone voices); its event loop paces every
stream. The peers run in a load generator process of their own (``bench.duplex_loadgen``, its
own session, pinned to core 1): the listeners (recvonly aiortc peers, each hearing a 5 s phrase-
cache phrase back to back; arrival times are the kernel's receive timestamps of the clear RTP
headers) and the talkers (sendrecv aiortc peers whose microphones speak espeak-ng questions in
real time and hear the replies). Windows alternate, twice, so that both kinds share whatever
else the machine was doing:

- quiet (6 s): the talkers connected, their microphones sending silence (the gateway already
  decodes, resamples and runs the VAD on every uplink frame);
- talk (8 s): each talker asking a question, hearing the reply out, asking the next; Whisper is
  busy the whole window (a final per question, partials whenever its worker is free).

Measured per window: the listeners' packet lateness (arrival - RTP timestamp / 48 kHz, minus
that stream's earliest offset in the window), the gateway's pacer counters (slots released
> 5 ms late), loop stalls >= 10 ms (the gateway's StallWatch, as ``--stall-warn-ms 10``), the
CPU of the event loop's thread and of the process's other threads. The targets, printed beside
the figures:

1. the talkers loaded the recogniser: a final transcript and an audible reply per talker at
   least, Whisper decodes in the talking windows (none to speak of in the quiet ones);
2. ASR is off the loop: the loop thread's CPU while they talk is within 15 points (% of a core)
   of the quiet windows' (the replies' packets, the events and the VAD model on voiced frames --
   the quiet windows' silence skips it -- are all it adds: +5 to +9.4 measured), while the
   other threads (Whisper) take >= 15 % of a core (Whisper on the loop would add >= 30);
3. the pacing held while they talked: >= 99 % of the listeners' packets within 5 ms (the
   README's bar for speaking streams: 98-100 % at 500, 99.9-100 % at 250), p99 lateness within
   5 ms of the quiet windows' (a decode holding the GIL or a core for a quarter frame would
   show), no loop stall of 20 ms (a whole frame late for every stream). Judged only when the
   quiet windows kept >= 99 % on time and other processes (not the gateway's own Whisper
   process) took <= 30 % of a core in every window: on this shared 2-vCPU machine other
   tenants took 0-130 % of a core and moved both kinds of window from 17 % to 100 % on time
   by themselves; then the comparison measures them, not us, and the test is skipped with the
   numbers.

Why 100/4 on 2 cores (measured here, 2 vCPUs, load average 2-7 from other work): the loop
thread alone needs ~30-38 % of a core for 100 listeners and ~27 % for 4 silent talkers (~7 %
each: SRTP, jitter buffer, Opus decode, resampling and Silero on every 20 ms uplink frame);
200 listeners + 10 talkers took 60-77 % in the quiet window, the load generator 50-60 % of the
other core, and Whisper wants both cores while anyone speaks: more than the machine, so even
the quiet windows missed their schedule (42 % on time) before a word was said. 4 talkers
still keep Whisper's worker busy all the talking window (partials fill it).

What made it hold (2026-12-01, calm, flock -x; was an xfail at 96.6-97.7 % talking against
99.1-99.8 % quiet): a tick's packets leave at the end of that tick (``Ticker.after_each_tick``
-> ``udp_mux.flush_pending``; the ``call_soon`` flush had waited one loop iteration behind
whatever was ready: 2.7 % of the batches > 5 ms while they talked), the receive paths' playout
periods (decode, resampling, VAD) run after the tick's sends (``Ticker.call_after_sends``), and
Silero skips sustained silence (the gate): talking 99.17 and 99.55 % against 99.91 and 99.61 %.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from bench.common import write_results
from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.api.routes import REGISTRY
from gateway.config import GatewayConfig
from gateway.runtime.stall_watch import StallStats, StallWatch
from gateway.testing.spoken_audio import have_espeak
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

REPO = Path(__file__).resolve().parent.parent
BIG = (os.cpu_count() or 1) >= 4
LISTENERS = int(os.environ.get("DUPLEX_LOAD_LISTENERS", "200" if BIG else "100"))
TALKERS = int(os.environ.get("DUPLEX_LOAD_TALKERS", "10" if BIG else "4"))
ASR = os.environ.get("DUPLEX_LOAD_ASR", "whisper:tiny.en")  # e.g. whisper:tiny.en?threads=1
# smart-turn: the talkers' pauses judged by the turn model too (its own process)
TURN_DETECTOR = os.environ.get("DUPLEX_LOAD_TURN_DETECTOR", "smart-turn")
# 0: the talkers' SRTP through aiortc's receive task, not the fast path (to compare in one tree)
RX_FAST_PATH = os.environ.get("DUPLEX_LOAD_RX_FAST_PATH", "1") != "0"
ROUNDS, QUIET_S, TALK_S = 2, 6.0, 8.0
OTHERS_MAX_PCT = 30.0  # other processes' CPU (% of a core) above which pacing is not judged


def voices() -> VoiceRegistry:
    # replies in a 1 s tone; the listeners hear a 5 s phrase (phrase-cache hits after one play)
    return VoiceRegistry([
        ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000),
        ToneSynthesizer(name="listen", frequency=330.0, seconds=5.0, sample_rate=24_000),
    ])



def _children_cpu_s(recognizer: object) -> float:
    """CPU seconds (user + system) of the recogniser's child processes (Whisper's default)."""
    total = 0.0
    for child in getattr(recognizer, "processes", ()):
        if child.pid is None:
            continue
        with open(f"/proc/{child.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total

class GatewayCounters:
    """The in-process gateway's own view, read at each phase boundary."""

    def __init__(self, gateway, watch: StallWatch) -> None:
        self.registry = gateway.registry
        self.watch = watch
        self.marks: dict[str, dict] = {}

    def read(self) -> dict:
        slots = late = rebases = 0
        for session in self.registry:
            stats = session.webrtc.sink.pacer.stats
            slots += stats.slots
            late += stats.late_slots
            rebases += stats.rebases
        recognizer = self.registry.duplex.recognizer
        # read on the event loop's thread (the PHASE lines are handled there): its own CPU
        # time, and the whole process's (the Whisper threads, the encoder pool ...)
        return {"slots": slots, "late_slots": late, "rebases": rebases,
                "decodes": recognizer.decodes, "partials_skipped": recognizer.skipped,
                "loop_cpu_s": time.thread_time(), "process_cpu_s": time.process_time(),
                "asr_process_cpu_s": _children_cpu_s(recognizer), "at": time.monotonic(),
                "rx_fast": sum(s.webrtc.rx_fast is not None for s in self.registry)}

    def mark(self, phase: str) -> None:
        if phase.startswith(("quiet_", "talk_")) and not phase.endswith("_end"):
            self.watch.stats = StallStats()  # stalls counted per window
        self.marks[phase] = self.read()
        if phase.endswith("_end"):
            self.marks[phase]["stalls"] = self.watch.stats.stalls
            self.marks[phase]["max_stall_ms"] = self.watch.stats.max_stall_ms

    def windows(self, kind: str) -> dict:
        """Summed over the windows of ``kind`` (quiet or talk)."""
        keys = ("slots", "late_slots", "rebases", "decodes", "loop_cpu_s", "process_cpu_s",
                "asr_process_cpu_s", "at")
        total = dict.fromkeys(keys, 0.0) | {"stalls_10ms": 0, "max_stall_ms": 0.0}
        for n in range(1, ROUNDS + 1):
            a, b = self.marks[f"{kind}_{n}"], self.marks[f"{kind}_{n}_end"]
            for key in keys:
                total[key] += b[key] - a[key]
            total["stalls_10ms"] += b["stalls"]
            total["max_stall_ms"] = max(total["max_stall_ms"], b["max_stall_ms"])
        total["late_share"] = total["late_slots"] / total["slots"] if total["slots"] else None
        wall = total.pop("at")
        # % of one core: the event loop's thread, and every other thread of the process
        total["loop_cpu_pct"] = round(100 * total["loop_cpu_s"] / wall, 1)
        total["other_threads_cpu_pct"] = round(
            100 * (total["process_cpu_s"] - total["loop_cpu_s"]) / wall, 1)
        total["asr_process_cpu_pct"] = round(100 * total["asr_process_cpu_s"] / wall, 1)
        return total


class Gateway:
    """An in-process gateway on 127.0.0.1 (as the tests' ``start_gateway`` fixture)."""

    def __init__(self, app: web.Application, runner: web.AppRunner, url: str) -> None:
        self.app, self.runner, self.url = app, runner, url

    @property
    def registry(self):
        return self.app[REGISTRY]


async def start_gateway(**overrides) -> Gateway:
    config = dataclasses.replace(
        GatewayConfig(host="127.0.0.1", port=0, ice_hosts=("127.0.0.1",)), **overrides)
    app = create_app(config, voices())
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return Gateway(app, runner, f"http://127.0.0.1:{runner.addresses[0][1]}")


def check(name: str, ok: bool, figure: object, target: str, checks: list[dict]) -> None:
    checks.append({"check": name, "ok": ok, "figure": figure, "target": target})


async def run() -> dict:
    started = time.monotonic()
    gateway = await start_gateway(duplex=True, reply_voice="tone", asr=ASR,
                                  turn_detector=TURN_DETECTOR, rx_fast_path=RX_FAST_PATH,
                                  max_sessions=LISTENERS + TALKERS + 20, connect_timeout_s=60.0)
    tmp_path = Path(tempfile.mkdtemp(prefix="duplex_load_"))
    gateway.registry.gc.freeze()  # as gateway.cli does once serving
    watch = StallWatch(0.010)  # the gateway's own loop-stall watch (``--stall-warn-ms 10``)
    watch.start()
    counters = GatewayCounters(gateway, watch)
    out = tmp_path / "duplex_load.json"
    cmd = [sys.executable, "-m", "bench.duplex_loadgen", "--url", gateway.url,
           "--server-pid", str(os.getpid()), "--listeners", str(LISTENERS),
           "--talkers", str(TALKERS), "--voice", "listen", "--utterances", "8",
           "--rounds", str(ROUNDS), "--quiet-window", str(QUIET_S),
           "--talk-window", str(TALK_S), "--out", str(out)]
    if (os.cpu_count() or 1) >= 2 and shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]  # the peers off the gateway's usual core
    load_before = os.getloadavg()
    # a session of its own: with sched autogroup the CPU is shared between sessions first, and
    # the peers must not take their share out of the gateway's
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True)
    lines: list[str] = []
    try:
        async with asyncio.timeout(130):
            assert proc.stdout is not None
            async for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                if line.startswith("PHASE "):
                    counters.mark(line[6:])
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        watch.stop()
        await gateway.runner.cleanup()
        aiortc_compat.restrict_ice_hosts(None)
    if proc.returncode != 0:
        raise SystemExit("the load generator failed:\n" + "\n".join(lines[-40:]))
    result = json.loads(out.read_text())
    connect = result["connect"]
    assert connect["listeners_ok"] == LISTENERS and not connect["talkers_failed"], connect
    quiet, talk = result["pooled"]["quiet"], result["pooled"]["talk"]
    gw = {kind: counters.windows(kind) for kind in ("quiet", "talk")}
    talkers = result["talkers_summary"]

    print(f"\n{LISTENERS} listeners, {TALKERS} talkers, {ASR}; connect {connect['seconds']} s; "
          f"load average before {[round(v, 2) for v in load_before]}")
    print(f"{'window':<8} {'packets':>7} {'ontime%':>7} {'worst%':>7} {'p50':>6} {'p99':>6} "
          f"{'p99.9':>6} {'max':>6} {'lost':>4} {'gwCPU%':>6} {'genCPU%':>7} {'other%':>6} "
          f"{'load1':>5}")
    for w in result["windows"]:
        late = w["lateness_ms"]
        print(f"{w['kind'] + ' ' + str(w['round']):<8} {w['packets_received']:>7} "
              f"{100 * w['on_time_share']:>7.2f} {100 * w['on_time_share_worst_session']:>7.2f} "
              f"{late['p50']:>6.2f} {late['p99']:>6.2f} {late['p999']:>6.2f} {late['max']:>6.1f} "
              f"{w['packets_lost']:>4} {w['server_cpu_pct']:>6.1f} {w['loadgen_cpu_pct']:>7.1f} "
              f"{w['others_cpu_pct']:>6.1f} {w['loadavg'][0]:>5.2f}")
    for kind, p in (("quiet", quiet), ("talk", talk)):
        late, g = p["lateness_ms"], gw[kind]
        print(f"{kind + ' all':<8} {p['packets']:>7} {100 * p['on_time_share']:>7.2f} "
              f"{'':>7} {late['p50']:>6.2f} {late['p99']:>6.2f} {late['p999']:>6.2f} "
              f"{late['max']:>6.1f}   gateway: {100 * (g['late_share'] or 0):.3f} % slots late "
              f"> 5 ms, {g['rebases']:.0f} rebases, {g['stalls_10ms']} stalls >= 10 ms "
              f"(max {g['max_stall_ms']} ms), {g['decodes']:.0f} Whisper decodes; CPU: loop "
              f"thread {g['loop_cpu_pct']} %, other threads {g['other_threads_cpu_pct']} %, "
              f"Whisper's process {g['asr_process_cpu_pct']} %")
    print(f"talkers: {talkers}; receive fast path: {counters.marks['talk_1']['rx_fast']} "
          f"sessions; took {time.monotonic() - started:.1f} s")

    checks: list[dict] = []
    # 1. the talkers really loaded the recogniser in the talking windows
    check("final transcripts", talkers["final_transcripts"] >= TALKERS,
          talkers["final_transcripts"], f">= {TALKERS}", checks)
    check("audible replies", talkers["audible_replies"] >= TALKERS,
          talkers["audible_replies"], f">= {TALKERS}", checks)
    check("Whisper decodes talking", gw["talk"]["decodes"] >= TALKERS, gw["talk"]["decodes"],
          f">= {TALKERS}", checks)
    check("Whisper decodes quiet", gw["quiet"]["decodes"] <= 2, gw["quiet"]["decodes"], "<= 2",
          checks)
    check("every listener kept receiving", all(
        w["sessions_measured"] == LISTENERS and not w["sessions_without_packets"]
        for w in result["windows"]), None, "all", checks)
    # 2. ASR off the loop: its CPU is the other threads' or (the default) its child process's
    asr_cpu = gw["talk"]["other_threads_cpu_pct"] + gw["talk"]["asr_process_cpu_pct"]
    check("ASR CPU off the loop (% core)", asr_cpu >= 15.0, asr_cpu, ">= 15", checks)
    check("loop CPU talking - quiet (points)",
          gw["talk"]["loop_cpu_pct"] <= gw["quiet"]["loop_cpu_pct"] + 15.0,
          round(gw["talk"]["loop_cpu_pct"] - gw["quiet"]["loop_cpu_pct"], 1), "<= 15", checks)
    # 3. the pacing held while they talked -- if the machine let the quiet windows keep time
    others = [w["others_cpu_pct"] for w in result["windows"]]
    judged = quiet["on_time_share"] >= 0.99 and max(others) <= OTHERS_MAX_PCT
    if not judged:
        print(f"pacing not judged: other processes took {min(others):.0f}-{max(others):.0f} % "
              f"of a core in the windows (load average {os.getloadavg()[0]:.1f}); quiet "
              f"windows {100 * quiet['on_time_share']:.2f} % within 5 ms")
    check("talking on time (within 5 ms)", talk["on_time_share"] >= 0.99,
          round(100 * talk["on_time_share"], 2), ">= 99 %", checks)
    check("p99 talking - quiet (ms)",
          talk["lateness_ms"]["p99"] <= quiet["lateness_ms"]["p99"] + 5.0,
          round(talk["lateness_ms"]["p99"] - quiet["lateness_ms"]["p99"], 2), "<= 5", checks)
    check("max loop stall talking (ms)", gw["talk"]["max_stall_ms"] < 20.0,
          gw["talk"]["max_stall_ms"], "< 20", checks)
    print(f"{'check':<36} {'figure':>10} {'target':>8}  met")
    for c in checks:
        met = "yes" if c["ok"] else "NO"
        print(f"{c['check']:<36} {c['figure']!s:>10} {c['target']:>8}  {met}")
    return {"listeners": LISTENERS, "talkers": TALKERS, "asr": ASR, "pacing_judged": judged,
            "rx_fast_path": RX_FAST_PATH, "rx_fast_sessions": counters.marks["talk_1"]["rx_fast"],
            "quiet": quiet, "talk": talk, "gateway": gw, "talkers_summary": talkers,
            "checks": checks, "load_before": load_before}


def main() -> None:
    if not have_espeak():
        raise SystemExit("espeak-ng (Debian) speaks the questions: make test installs it")
    result = asyncio.run(run())
    print(f"wrote {write_results('duplex_load', result, default=str)}")


if __name__ == "__main__":
    main()
