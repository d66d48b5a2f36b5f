"""Full duplex: end of the user's speech -> first audible reply at the client, where the time goes,
the recogniser's word error rate, and how many talking sessions one core sustains.

The gateway runs as its own process (``python -m gateway --duplex --voice piper --agent ...
--ice-hosts 127.0.0.1``); our talking peer (``bench.duplex_peer.Talker``: an aiortc peer whose
microphone speaks espeak-ng questions in real time) runs here. Per question (turn):

- client: the microphone's last voiced frame sent (``RecordedMic.finished_at`` of the trimmed
  question) -> the first reply packet whose decoded 20 ms frame is louder than -45 dBFS, at the
  client (every packet is decoded on arrival: between utterances the gateway sends keep-alive
  silence, which is not audible);
- the gateway's own split of that turn (``GET /v1/sessions/{id}`` -> duplex.turns[].latency_ms,
  server-side clocks): endpointing (last voiced frame heard -> turn declared over: the
  ``--turn-silence-ms`` wait), ASR (-> final transcript, queue wait included), agent first text
  (-> first clause), TTS first audio (-> first RTP packet of the reply sent);
- what only the client sees: uplink (mic frame sent -> the gateway hears it: network, the
  uplink jitter buffer, where the VAD puts the end) = client - server - lead-in, and the reply's
  lead-in (its first packet -> its first audible frame).

Once the first audible frame is in, the reply is cut (``DELETE .../speech``) so the next
question need not wait for it to be spoken out; a random 0.4-0.9 s pause follows.
Configurations: ``echo`` (the echo agent), ``chat`` (the OpenAI-compatible chat stand-in, in
this process, ``--chat-delay-ms`` before its first token, subtracted in the "minus LLM" column),
``echo-fast`` (echo with ``--turn-silence-ms 300``), ``echo-nospec`` (echo with
``--asr-speculate-ms 0``: the final decode starts only when the turn has ended), ``echo-nopre``
(``--no-preemptive-reply``: agent and synthesis only once the turn has ended), ``echo-s200``
(the speculation and the post-speech pad at 200 ms) and ``echo-before`` (both: the defaults
before 2026-12-01). With the preemptive reply the chat stand-in's delay is mostly hidden in
the endpointing wait, so "minus LLM" then subtracts a delay that was not on the path. The phrase
cache is off unless ``--phrase-cache``: every reply clause is synthesized ("You said:" and
"Sure!" would otherwise be cache hits from the second turn on). WER: every final transcript
against its question (case and punctuation normalised).

Capacity (``--ladder``): for each N, a fresh gateway pinned to one core (``taskset -c 0``),
this process on core 1; N talkers, each asking ``--ramp-questions`` questions, one every
``--period`` s (staggered); a rung breaks when the end-of-speech -> audio p90 exceeds
``--max-p90-ms``, the ASR p90 (its queue) exceeds ``--max-asr-p90-ms``, or fewer than
``--min-replied`` of the questions get an audible reply within 15 s.

    python -m bench.duplex [--turns 20] [--configs echo,chat,echo-fast] [--ladder 1,2,4,6,8,12,16]
                           [--quick] [--nice -10]

The gateway runs in a session of its own (with sched autogroup, CPU is shared between sessions
first); ``--nice`` (negative, as root) favours it and this process over other work on a shared
machine.

Results: bench/results/duplex.json, a table on stdout, bench/results/duplex.png (matplotlib).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from bench import procstats
from bench.common import RESULTS, free_port, machine, pct, wait_healthy
from bench.duplex_peer import (
    QUESTIONS,
    UPLINK_KEYS,
    Talker,
    TurnResult,
    question_audio,
    vad_hangover_ms,
    wer,
)
from bench.load import pinned, stop, tail
from gateway import aiortc_compat

TARGET_MS = 450.0  # end of speech -> first audible reply, median (issue 26)
TARGET_P90_MS = 550.0
WARM_UP = "Hello, can you hear me?"
SPLIT_KEYS = ("endpointing", "asr", "agent_first_text", "tts_first_audio",
              "end_of_speech_to_audio")
CONFIGS: dict[str, dict[str, Any]] = {
    # the two end-of-turn detectors, named so (whichever is the gateway's default)
    "echo": {"agent": "echo", "extra": ["--turn-detector", "silence"]},
    "echo-smart": {"agent": "echo", "extra": ["--turn-detector", "smart-turn"]},
    # smart-turn as before 2026-12-02: the model asked at 100 ms of silence, an unsure question
    # waiting the unsure 500 ms
    "echo-smart-old": {"agent": "echo",
                       "extra": ["--turn-detector", "smart-turn", "--turn-probe-ms", "100",
                                 "--turn-question-silence-ms", "500"]},
    # smart-turn with the speculative final at 60 ms of pause (the model's probe), not 100
    "echo-smart-spec60": {"agent": "echo",
                          "extra": ["--turn-detector", "smart-turn", "--asr-speculate-ms", "60"]},
    # smart-turn's unsure wait and cap as before 2026-12-03 (500 / 1200 ms; now 350 / 800, as
    # the loop takes a turn ended too early back: conversation/continuation.py)
    "echo-smart-long": {"agent": "echo",
                        "extra": ["--turn-detector", "smart-turn", "--turn-unsure-silence-ms",
                                  "500", "--turn-max-silence-ms", "1200"]},
    "chat": {"agent": "chat", "extra": []},
    "echo-fast": {"agent": "echo", "extra": ["--turn-silence-ms", "300"]},
    # what the speculative final decode buys: the final decoded only once the turn has ended
    "echo-nospec": {"agent": "echo", "extra": ["--asr-speculate-ms", "0"]},
    # what the preemptive reply buys: agent and TTS only once the turn has ended
    "echo-nopre": {"agent": "echo", "extra": ["--no-preemptive-reply"]},
    # the speculation (and the segment's post-speech pad) at 200 ms, as before 2026-12-01
    "echo-s200": {"agent": "echo", "extra": ["--asr-speculate-ms", "200"]},
    # the defaults before 2026-12-01: speculation at 200 ms, no preemptive reply
    "echo-before": {"agent": "echo",
                    "extra": ["--asr-speculate-ms", "200", "--no-preemptive-reply"]},
}


# --- the gateway process -------------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
NICE = 0  # --nice


def own_session() -> None:
    """In the gateway child: a session of its own. With sched autogroup (the Linux default) the
    CPU is shared between sessions first: left in ours, the gateway would share one session's
    share with this bench (and, on a shared machine, be starved by busy sessions elsewhere).
    Many sockets; ``--nice`` for the session's group and the process."""
    os.setsid()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if NICE:
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
            f.write(str(NICE))
        os.nice(NICE)


def spawn(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as logf:
        return subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=REPO,
                                preexec_fn=own_session)


@contextlib.asynccontextmanager
async def gateway(agent: str, args: argparse.Namespace, tmp: Path, name: str,
                  extra: list[str] = (), cpu: int | None = None,
                  max_sessions: int = 20) -> AsyncIterator[tuple[str, Any]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "gateway", "--port", str(port), "--ice-hosts", "127.0.0.1",
           "--log-level", "WARNING", "--duplex", "--voice", args.voice, "--agent", agent,
           "--max-sessions", str(max_sessions), *extra, *args.gateway_arg]
    if not args.phrase_cache:
        cmd += ["--phrase-cache-mb", "0"]
    log = tmp / f"{name}.log"
    proc = spawn(pinned(cmd, cpu), log)
    try:
        await wait_healthy(url, proc, lambda: tail(log), 120)
        yield url, proc
    finally:
        stop(proc)
        if proc.returncode not in (0, -15, None):
            print(f"  gateway exited {proc.returncode}: {tail(log, 400)}", flush=True)


# --- statistics --------------------------------------------------------------------------------

def stats(values: list[float]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    if not v:
        return {"n": 0, "median": None, "p90": None, "min": None, "max": None}
    return {"n": len(v), "median": round(statistics.median(v), 1), "p90": round(pct(v, 90), 1),
            "min": round(min(v), 1), "max": round(max(v), 1)}


def summarize(rows: list[TurnResult], llm_delay_ms: float = 0.0) -> dict[str, Any]:
    good = [r for r in rows if r.error is None and len(r.turns) == 1 and r.server]
    out: dict[str, Any] = {
        "questions": len(rows),
        "measured": len(good),
        "no_reply": sum(r.first_audible is None for r in rows),
        "split_into_turns": sum(len(r.turns) > 1 for r in rows),
        "client_end_of_speech_to_audible_ms": stats([r.client_ms for r in good]),
        "uplink_ms": stats([r.uplink_ms for r in good]),
        # of which the VAD's hangover (offline, on the clean audio): the rest is transport,
        # the uplink jitter buffer and playout
        "vad_hangover_ms": stats([vad_hangover_ms(r.question) for r in good]),
        "reply_lead_in_ms": stats([r.lead_in_ms for r in good]),
        "server_ms": {k: stats([(r.server["latency_ms"] or {}).get(k) for r in good])
                      for k in SPLIT_KEYS},
        # the final decode itself, and its wait for the recogniser (behind other decodes);
        # speculative: decoded while the turn's end was still awaited
        "asr_decode_ms": stats([(r.server.get("asr") or {}).get("decode_ms") for r in good]),
        "asr_wait_ms": stats([(r.server.get("asr") or {}).get("wait_ms") for r in good]),
        "speculative_finals": sum(bool((r.server.get("asr") or {}).get("speculative"))
                                  for r in good),
        # the reply (agent, first clause's synthesis) prepared before the turn ended
        "prepared_replies": sum(bool(r.server.get("reply_prepared")) for r in good),
    }
    if llm_delay_ms:
        out["llm_first_token_delay_ms"] = llm_delay_ms
        out["agent_overhead_ms"] = stats([
            r.server["latency_ms"]["agent_first_text"] - llm_delay_ms for r in good
            if r.server["latency_ms"].get("agent_first_text") is not None])
        out["client_minus_llm_delay_ms"] = stats([r.client_ms - llm_delay_ms for r in good])
    out["wer"] = wer([(r.question, r.transcript) for r in rows if r.turns])
    return out


# --- part 1: latency per configuration ---------------------------------------------------------

async def ask_series(talker: Talker, questions: list[str], rng: random.Random,
                     label: str) -> list[TurnResult]:
    rows = []
    for i, q in enumerate(questions):
        r = await talker.ask(q)
        rows.append(r)
        srv = (r.server or {}).get("latency_ms") or {}
        print(f"  {label} {i + 1:>2}/{len(questions)} "
              f"{'-' if r.client_ms is None else f'{r.client_ms:6.0f}'} ms "
              f"(endpoint {srv.get('endpointing')}, asr {srv.get('asr')}, "
              f"agent {srv.get('agent_first_text')}, tts {srv.get('tts_first_audio')}) "
              f"{r.transcript!r}{' ' + r.error if r.error else ''}", flush=True)
        await asyncio.sleep(rng.uniform(0.4, 0.9))  # a pause, at a random 20 ms phase
    return rows


async def latency_config(name: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    config = CONFIGS[name]
    agent = config["agent"]
    delay = 0.0
    async with contextlib.AsyncExitStack() as stack:
        chat = None
        if agent == "chat":
            from gateway.testing.chat_server import ChatStandIn, StandInConfig

            delay = args.chat_delay_ms
            chat = await stack.enter_async_context(
                ChatStandIn(StandInConfig(first_token_delay_ms=delay)))
            agent = f"openai+{chat.url}?model=stand-in"
        url, proc = await stack.enter_async_context(
            gateway(agent, args, tmp, f"latency-{name}", config["extra"]))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        talker = Talker(url, http)
        await talker.start()
        stack.push_async_callback(talker.close)
        rng = random.Random(name)
        await asyncio.sleep(0.5)
        await talker.ask(WARM_UP)  # first-call paths (ONNX sessions, sockets), not measured
        await asyncio.sleep(0.5)
        questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.turns)]
        load0, cpu0 = procstats.load_average(), procstats.cpu_sample(proc.pid)
        rows = await ask_series(talker, questions, rng, name)
        cpu = procstats.cpu_percent(cpu0, procstats.cpu_sample(proc.pid))
        state = await talker.state()
        result = summarize(rows, delay)
        result["gateway_uplink"] = {k: v for k, v in (state.get("uplink") or {}).items()
                                    if k in UPLINK_KEYS}
        result.update({
            "agent": "chat stand-in" if chat else agent, "gateway_args": config["extra"],
            "connect_ms": round(talker.connect_ms or 0, 1),
            "gateway_cpu_pct": round(cpu, 1), "loadavg_before": load0,
            "loadavg_after": procstats.load_average(),
            "chat_requests": None if chat is None else len(chat.requests),
            "turns": [r.as_json() for r in rows],
        })
        return result


# --- part 2: talking sessions on one core ------------------------------------------------------

async def talk_loop(talker: Talker, index: int, n: int, args: argparse.Namespace,
                    t0: float) -> list[TurnResult]:
    rows = []
    start = t0 + index * args.period / n  # staggered: the questions do not all end together
    for k in range(args.ramp_questions):
        await asyncio.sleep(max(0.0, start + k * args.period - time.monotonic()))
        q = QUESTIONS[(index * 7 + k) % len(QUESTIONS)]
        rows.append(await talker.ask(q))
    return rows


async def ramp_rung(n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rung: dict[str, Any] = {"n": n, "loadavg_before": procstats.load_average()}
    async with contextlib.AsyncExitStack() as stack:
        url, proc = await stack.enter_async_context(
            gateway("echo", args, tmp, f"ramp-{n}", cpu=args.server_cpu, max_sessions=n + 10))
        connector = aiohttp.TCPConnector(limit=0)
        http = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
        talkers = [Talker(url, http, i) for i in range(n)]
        for t in talkers:
            stack.push_async_callback(t.close)
        started = time.monotonic()
        await asyncio.gather(*(t.start() for t in talkers))
        rung["connect_s"] = round(time.monotonic() - started, 2)
        await asyncio.sleep(1.0)
        cpu0, cores0 = procstats.cpu_sample(proc.pid), procstats.core_times()
        me0 = procstats.cpu_sample(os.getpid())
        t0 = time.monotonic() + 0.5
        per = await asyncio.gather(*(talk_loop(t, i, n, args, t0) for i, t in
                                     enumerate(talkers)))
        rows = [r for rs in per for r in rs]
        cpu1, me1 = procstats.cpu_sample(proc.pid), procstats.cpu_sample(os.getpid())
        rung["gateway_cpu_pct"] = round(procstats.cpu_percent(cpu0, cpu1), 1)
        rung["bench_cpu_pct"] = round(procstats.cpu_percent(me0, me1), 1)
        rung["core_busy_pct"] = procstats.core_busy_percent(cores0, procstats.core_times())
        rung["partials"] = sum(len([e for e in t.of("transcript") if not e["final"]])
                               for t in talkers)
        rung["health"] = None
        with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
            async with http.get(f"{url}/healthz") as r:
                rung["health"] = {k: v for k, v in (await r.json()).items()
                                  if k in ("sessions", "gc", "stalls")}
    rung.update(summarize(rows))
    rung["loadavg_after"] = procstats.load_average()
    rung["turns"] = [r.as_json() for r in rows]
    rung["broken"] = ramp_verdict(rung, args)
    return rung


def ramp_verdict(rung: dict[str, Any], args: argparse.Namespace) -> list[str]:
    why = []
    replied = 1 - rung["no_reply"] / max(1, rung["questions"])
    if replied < args.min_replied:
        why.append(f"only {replied:.0%} of questions got an audible reply")
    p90 = rung["client_end_of_speech_to_audible_ms"]["p90"]
    if p90 is None or p90 > args.max_p90_ms:
        why.append(f"end of speech -> audio p90 {p90} ms > {args.max_p90_ms:g}")
    asr = rung["server_ms"]["asr"]["p90"]
    if asr is None or asr > args.max_asr_p90_ms:
        why.append(f"ASR p90 {asr} ms > {args.max_asr_p90_ms:g} (its queue)")
    return why


# --- report ----------------------------------------------------------------------------------

def f(v: Any, spec: str = "7.0f") -> str:
    return format(v, spec) if isinstance(v, int | float) else "-".rjust(len(format(0, spec)))


def print_latency(results: dict[str, dict[str, Any]]) -> None:
    print(f"\nend of user speech -> first audible reply (ms; median / p90 over the measured "
          f"turns; target median <= {TARGET_MS:.0f}, p90 <= {TARGET_P90_MS:.0f})")
    print(f"{'config':<10} {'n':>3} {'client':>7} {'p90':>7} {'uplink':>7} {'(vad)':>7} "
          f"{'endpt':>7} {'asr':>7} {'asr p90':>7} {'agent':>7} {'tts':>7} {'lead-in':>7} "
          f"{'server':>7} {'-LLM':>7} {'WER %':>6} {'load1':>5}")
    for name, r in results.items():
        c, s = r["client_end_of_speech_to_audible_ms"], r["server_ms"]
        minus = (r.get("client_minus_llm_delay_ms") or {}).get("median")
        agent = (r.get("agent_overhead_ms") or s["agent_first_text"])["median"]
        w = r["wer"]["wer"]
        print(f"{name:<10} {r['measured']:>3} {f(c['median'])} {f(c['p90'])} "
              f"{f(r['uplink_ms']['median'])} {f(r['vad_hangover_ms']['median'])} "
              f"{f(s['endpointing']['median'])} "
              f"{f(s['asr']['median'])} {f(s['asr']['p90'])} {f(agent, '7.1f')} "
              f"{f(s['tts_first_audio']['median'])} {f(r['reply_lead_in_ms']['median'])} "
              f"{f(s['end_of_speech_to_audio']['median'])} {f(minus)} "
              f"{f(None if w is None else 100 * w, '6.1f')} {r['loadavg_before'][0]:>5.2f}")
    print("(uplink: client - server - lead-in, i.e. mic -> the gateway hearing the last voiced "
          "frame; (vad): of which the VAD's hangover, offline; agent: for chat, minus the "
          "stand-in's own first-token delay; -LLM: client minus that delay; server: the "
          "gateway's end_of_speech_to_audio)")
    for name, r in results.items():
        d, w = r.get("asr_decode_ms") or {}, r.get("asr_wait_ms") or {}
        print(f"{name}: final decode {d.get('median')} ms median (p90 {d.get('p90')}), its wait "
              f"for the recogniser {w.get('median')} ms (p90 {w.get('p90')}); "
              f"{r.get('speculative_finals')}/{r['measured']} finals speculative, "
              f"{r.get('prepared_replies')}/{r['measured']} replies prepared before the turn "
              "ended")
    for name, r in results.items():
        u = r.get("gateway_uplink") or {}
        if u:
            print(f"{name}: gateway uplink receive path: playout delay {u.get('playout_delay_ms')}"
                  f" ms mean (p95 {u.get('playout_delay_p95_ms')}), jitter buffer target "
                  f"{u.get('target_frames')} frames, jitter {u.get('jitter_ms')} ms, late "
                  f"{u.get('late')}, concealed {u.get('concealed')}")


def print_ramp(rungs: list[dict[str, Any]]) -> None:
    print("\ntalking sessions on one pinned core (echo agent; ms)")
    print(f"{'N':>3} {'turns':>5} {'noreply':>7} {'e2e p50':>7} {'e2e p90':>7} {'asr p50':>7} "
          f"{'asr p90':>7} {'asr max':>7} {'partials':>8} {'gw CPU%':>7} {'bench%':>6} "
          f"{'load1':>5}  status")
    for r in rungs:
        c, a = r["client_end_of_speech_to_audible_ms"], r["server_ms"]["asr"]
        print(f"{r['n']:>3} {r['questions']:>5} {r['no_reply']:>7} {f(c['median'])} "
              f"{f(c['p90'])} {f(a['median'])} {f(a['p90'])} {f(a['max'])} "
              f"{r['partials']:>8} {f(r['gateway_cpu_pct'], '7.1f')} "
              f"{f(r['bench_cpu_pct'], '6.1f')} {r['loadavg_before'][0]:>5.2f}  "
              f"{'BROKE: ' + '; '.join(r['broken']) if r['broken'] else 'ok'}")


def _plot_split(ax_split: Any, data: dict[str, Any], names: list[str]) -> None:
    parts = [("uplink", lambda r: r["uplink_ms"]),
             ("endpointing", lambda r: r["server_ms"]["endpointing"]),
             ("ASR", lambda r: r["server_ms"]["asr"]),
             ("agent", lambda r: r["server_ms"]["agent_first_text"]),
             ("TTS first audio", lambda r: r["server_ms"]["tts_first_audio"]),
             ("reply lead-in", lambda r: r["reply_lead_in_ms"])]
    bottom = [0.0] * len(names)
    for label, get in parts:
        vals = [get(data["latency"][n])["median"] or 0.0 for n in names]
        ax_split.bar(names, vals, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax_split.scatter(names, [data["latency"][n]["client_end_of_speech_to_audible_ms"]["median"]
                             or 0 for n in names], color="black", zorder=3,
                     label="client median (measured)")
    ax_split.axhline(TARGET_MS, color="grey", ls="--", lw=0.8)
    ax_split.set(ylabel="ms (medians)", title="end of speech -> first audible reply")
    ax_split.legend(fontsize=7, loc="upper right", framealpha=0.9)


def plot(data: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_split, ax_ramp) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(data["latency"])
    if not names:
        ax_split.set_axis_off()
    else:
        _plot_split(ax_split, data, names)
    rungs = data.get("ramp") or []
    if rungs:
        ns = [r["n"] for r in rungs]
        for key, style in (("median", "-o"), ("p90", "--o")):
            ax_ramp.plot(ns, [r["client_end_of_speech_to_audible_ms"][key] for r in rungs],
                         style, color="tab:blue", label=f"end of speech -> audio {key}")
            ax_ramp.plot(ns, [r["server_ms"]["asr"][key] for r in rungs], style,
                         color="tab:red", label=f"ASR {key}")
        ax_ramp.set(xlabel="talking sessions N (gateway on one core)", ylabel="ms",
                    title="talking sessions per core")
        ax_ramp.grid(alpha=0.3)
        ax_ramp.legend(fontsize=7)
    else:
        ax_ramp.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(matplotlib.__version__)


# --- main --------------------------------------------------------------------------------------

async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    started = time.monotonic()
    configs = [c for c in args.configs.split(",") if c]
    ladder = sorted({int(x) for x in args.ladder.split(",") if x.strip()})
    # espeak-ng once per question, before anything is timed
    for q in [WARM_UP, *QUESTIONS]:
        question_audio(q)
        vad_hangover_ms(q)
    data: dict[str, Any] = {"latency": {}, "ramp": []}
    with tempfile.TemporaryDirectory(prefix="bench-duplex-") as tmpdir:
        tmp = Path(tmpdir)
        for name in configs:
            print(f"[{time.monotonic() - started:6.1f}s] latency: {name}", flush=True)
            data["latency"][name] = await latency_config(name, args, tmp)
        if ladder:
            if args.bench_cpu >= 0 and shutil.which("taskset"):
                os.sched_setaffinity(0, {args.bench_cpu})
            for n in ladder:
                print(f"[{time.monotonic() - started:6.1f}s] ramp: N={n}", flush=True)
                rung = await ramp_rung(n, args, tmp)
                data["ramp"].append(rung)
                print_ramp([rung])
                if rung["broken"]:
                    break
    held = [r["n"] for r in data["ramp"] if not r["broken"]]
    all_rows = [t for r in data["latency"].values() for t in r["turns"]]
    data["wer_all"] = wer([(t["question"], t["transcript"]) for t in all_rows if t["turns"]])
    data["summary"] = {
        "target_median_ms": TARGET_MS, "target_p90_ms": TARGET_P90_MS,
        "median_ms": {n: r["client_end_of_speech_to_audible_ms"]["median"]
                      for n, r in data["latency"].items()},
        "p90_ms": {n: r["client_end_of_speech_to_audible_ms"]["p90"]
                   for n, r in data["latency"].items()},
        "target_met": {n: (r["client_end_of_speech_to_audible_ms"]["median"] or 1e9)
                       <= TARGET_MS and (r["client_end_of_speech_to_audible_ms"]["p90"]
                                         or 1e9) <= TARGET_P90_MS
                       for n, r in data["latency"].items()},
        "talking_sessions_held_on_one_core": max(held) if held else None,
        "broke_at": next((r["n"] for r in data["ramp"] if r["broken"]), None),
    }
    data["duration_s"] = round(time.monotonic() - started, 1)
    return data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=20, help="measured questions per configuration")
    p.add_argument("--configs", default="echo,echo-smart,chat,echo-fast",
                   help=f"comma-separated, of {', '.join(CONFIGS)} ('' for none)")
    p.add_argument("--chat-delay-ms", type=float, default=100.0,
                   help="the chat stand-in's first-token delay (subtracted)")
    p.add_argument("--ladder", default="1,2,4,6,8,12,16",
                   help="talking sessions per rung ('' to skip the capacity part)")
    p.add_argument("--ramp-questions", type=int, default=4, help="questions per talker a rung")
    p.add_argument("--period", type=float, default=6.0,
                   help="seconds from one question's start to the next, per talker")
    p.add_argument("--max-p90-ms", type=float, default=2000.0)
    p.add_argument("--max-asr-p90-ms", type=float, default=1000.0)
    p.add_argument("--min-replied", type=float, default=0.9)
    p.add_argument("--server-cpu", type=int, default=0, help="core for the ramp's gateway")
    p.add_argument("--bench-cpu", type=int, default=1,
                   help="core for this process in the ramp (-1: not pinned)")
    p.add_argument("--voice", default="piper")
    p.add_argument("--phrase-cache", action="store_true",
                   help="leave the gateway's phrase cache on (repeated first clauses are hits)")
    p.add_argument("--gateway-arg", action="append", default=[], metavar="ARG",
                   help="an extra flag for every gateway (repeat)")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness for the gateway and this process (negative, as root: favour "
                   "them over other work on a shared machine)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run in about 70 s: echo and chat, 5 turns each, one rung of 3 "
                   "talkers asking 2 questions each")
    p.add_argument("--out", default=str(RESULTS / "duplex.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.turns = min(args.turns, 5)
        if args.configs == p.get_default("configs"):
            args.configs = "echo,echo-smart"
        args.ladder = "3" if args.ladder == p.get_default("ladder") else args.ladder
        args.ramp_questions = min(args.ramp_questions, 2)
        args.period = min(args.period, 5.0)
    global NICE
    NICE = args.nice
    if NICE:
        with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
            f.write(str(NICE))
        os.nice(NICE)
    data = asyncio.run(main_async(args))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    png = out.with_suffix(".png")
    data["matplotlib"] = plot(data, png)
    data = {"benchmark": "duplex", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine(), "loadavg_end": procstats.load_average(),
            "settings": {k: v for k, v in vars(args).items() if k != "out"}, **data}
    out.write_text(json.dumps(data, indent=1))
    if data["latency"]:
        print_latency(data["latency"])
    if data["ramp"]:
        print_ramp(data["ramp"])
    s = data["summary"]
    w = data["wer_all"]
    if w["wer"] is not None:
        print(f"\nWER (Whisper tiny.en, espeak-ng questions): {100 * w['wer']:.1f} % "
              f"({w['edits']} edits / {w['reference_words']} words, {w['exact_utterances']}/"
              f"{w['utterances']} utterances exact)")
    for name, ok in s["target_met"].items():
        print(f"target median <= {TARGET_MS:.0f} / p90 <= {TARGET_P90_MS:.0f} ms, {name}: "
              f"{'met' if ok else 'MISSED'} ({s['median_ms'][name]} / {s['p90_ms'][name]} ms, "
              f"load average at the start {data['latency'][name]['loadavg_before']})")
    if data["ramp"]:
        print(f"talking sessions on one core: held up to N={s['talking_sessions_held_on_one_core']}"
              f", broke at N={s['broke_at']}")
    print(f"load average at the end {data['loadavg_end']}; took {data['duration_s']} s; "
          f"written {out}" + (f" and {png}" if data["matplotlib"] else " (no matplotlib)"))
    return data


if __name__ == "__main__":
    main()
