"""Load generator for full duplex: L listening sessions and T talking sessions in one process.

Listeners are ``bench.loadgen.LoadSession``s (recvonly; every datagram's clear RTP header and
kernel receive timestamp recorded before SRTP, then dropped: a few µs a packet), each asked to
speak a short phrase many times back to back (after one warm-up play, every one a phrase-cache
hit). Talkers are ``bench.duplex_peer.Talker``s (sendrecv aiortc peers whose microphones speak
espeak-ng questions in real time; they receive and decode the spoken replies).

Phases, announced on stdout one line each (``PHASE <name>``, flushed) so that a caller can read
its own counters at the same moments: ``connected`` -> ``speaking`` (listeners hearing speech)
-> ``--rounds`` times: ``quiet_<n>`` ... ``quiet_<n>_end`` (the talkers connected, their
microphones sending silence) -> ``talk_<n>`` ... ``talk_<n>_end`` (each talker asking a
question, waiting for the spoken reply to end, pausing 0.3-1 s, asking the next; afterwards
each finishes its question and reply before the next quiet window) -> ``done``. Alternating
windows let both kinds share whatever else the (shared) machine was doing; ``pooled`` sums
each kind up. Packet lateness per listener: offset = arrival - RTP timestamp / 48 kHz,
lateness = offset - the window's minimum offset; on time = within 5 ms (``bench.loadgen``).
``others_cpu_pct``: what other processes took of the machine in a window (% of one core):
not the server, not its child processes (Whisper decodes in one: ``server_children_cpu_pct``),
not this load generator.

    python -m bench.duplex_loadgen --url http://127.0.0.1:8080 --server-pid PID \
        --listeners 200 --talkers 10 --out result.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import sys
import time
from typing import Any

import aiohttp
import numpy as np

from bench import procstats
from bench.duplex_peer import QUESTIONS, Talker, TurnResult, question_audio
from bench.loadgen import (
    ON_TIME_S,
    LoadSession,
    bounded,
    measure_window,
    stream_stats,
    wait_speaking,
)
from gateway import aiortc_compat

FINAL = ("done", "failed", "interrupted")


def phase(name: str) -> None:
    print(f"PHASE {name}", flush=True)


async def talk(talker: Talker, index: int, stop: asyncio.Event, rows: list[TurnResult]) -> None:
    rng = random.Random(index)
    await asyncio.sleep(rng.uniform(0.0, 1.5))  # not all in step
    k = 0
    while not stop.is_set():
        q = QUESTIONS[(index * 7 + k) % len(QUESTIONS)]
        k += 1
        since = len(talker.events)
        result = await talker.ask(q, reply_timeout=10.0, stop_reply=False)
        rows.append(result)
        replies = {e["utterance"] for e in talker.of("reply", since)}

        def spoken(since: int = since, replies: set[str] = replies) -> bool:
            ended = {e["id"] for e in talker.of("utterance", since) if e["state"] in FINAL}
            return replies <= ended

        await talker.until(spoken, 8.0)  # let the reply be spoken out: no barge-in
        await asyncio.sleep(rng.uniform(0.3, 1.0))


async def speak(session: LoadSession, text: str, voice: str | None) -> dict[str, Any]:
    assert session.session_url is not None
    body: dict[str, Any] = {"text": text}
    if voice:
        body["voice"] = voice
    async with session.http.post(f"{session.session_url}/speech", json=body) as r:
        reply = await r.json(content_type=None)
        if r.status != 202:
            raise RuntimeError(f"speech: HTTP {r.status}: {reply}")
        return dict(reply)


async def warm_phrase(session: LoadSession, text: str, voice: str | None,
                      timeout: float = 60.0) -> dict[str, Any]:
    """Play ``text`` once to its end: the gateway keeps it in its phrase cache."""
    reply = await speak(session, text, voice)
    deadline = time.monotonic() + timeout
    state: dict[str, Any] = {}
    while state.get("state") not in FINAL and time.monotonic() < deadline:
        async with session.http.get(session.base_url + reply["location"],
                                    params={"wait": "1", "timeout": "10"}) as r:
            state = await r.json(content_type=None)
    await asyncio.sleep(0.3)
    return state


def others_cpu_pct(window: dict[str, Any]) -> float:
    """CPU other processes took in the window (% of one core): every core's busy share minus
    the server's, its children's and the load generator's."""
    busy = sum((window.get("core_busy_pct") or {}).values())
    others = (busy - window.get("server_cpu_pct", 0.0)
              - window.get("server_children_cpu_pct", 0.0) - window.get("loadgen_cpu_pct", 0.0))
    return max(0.0, round(others, 1))  # (the samples are not simultaneous: a little noise)


def child_pids(pid: int) -> list[int]:
    """The processes ``pid``'s threads started (the server's Whisper processes)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def children_cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += procstats.cpu_sample(pid).cpu_s
    return total


def pooled(latenesses: list[np.ndarray]) -> dict[str, Any]:
    late = np.concatenate(latenesses) if latenesses else np.zeros(0)
    if not late.size:
        return {"packets": 0}
    return {"packets": int(late.size), "on_time_share": float((late <= ON_TIME_S).mean()),
            "lateness_ms": {q: float(np.percentile(late, v)) * 1000 for q, v in
                            (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))}
            | {"max": float(late.max()) * 1000}}


async def window(kind: str, n: int, live: list[LoadSession], args: argparse.Namespace,
                 seconds: float, pool: dict[str, list[np.ndarray]]) -> dict[str, Any]:
    phase(f"{kind}_{n}")
    children = child_pids(args.server_pid)
    cpu0, t0 = children_cpu_s(children), time.monotonic()
    summary, _, _ = await measure_window(live, args.server_pid, seconds)
    summary["server_children_cpu_pct"] = round(
        100 * (children_cpu_s(children) - cpu0) / (time.monotonic() - t0), 1)
    phase(f"{kind}_{n}_end")
    summary["others_cpu_pct"] = others_cpu_pct(summary)
    for s in live:  # this window's arrays are still in the streams (reset at the next one)
        st = stream_stats(s.stream, 0.0)
        if st is not None:
            pool[kind].append(st["lateness"])
    return summary


async def run(args: argparse.Namespace) -> dict[str, Any]:
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    for q in QUESTIONS:
        question_audio(q)  # espeak-ng now, not while measuring
    out: dict[str, Any] = {"listeners": args.listeners, "talkers": args.talkers,
                           "rounds": args.rounds}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=100)) as http:
        listeners = [LoadSession(i, args.url, http, full=False) for i in range(args.listeners)]
        talkers = [Talker(args.url, http, i) for i in range(args.talkers)]
        try:
            t = time.monotonic()
            ok = await bounded(listeners, lambda s: s.connect(args.connect_timeout), args.batch)
            live = [s for s, good in zip(listeners, ok, strict=True) if good is True]
            talked = await asyncio.gather(*(t.start() for t in talkers), return_exceptions=True)
            errors = [repr(e)[:200] for e in talked if isinstance(e, BaseException)]
            out["connect"] = {"listeners_ok": len(live), "talkers_failed": len(errors),
                              "errors": sorted({s.error or "" for s in listeners
                                                if s.connect_ms is None} | set(errors))[:5],
                              "seconds": round(time.monotonic() - t, 1)}
            phase("connected")
            if not live or errors:
                return out
            if args.utterances:
                t = time.monotonic()
                out["warm_up"] = (await warm_phrase(live[0], args.text, args.voice)).get("state")

                async def queue(s: LoadSession) -> None:
                    for _ in range(args.utterances):
                        await speak(s, args.text, args.voice)

                failed = [r for r in await bounded(live, queue, 50)
                          if isinstance(r, BaseException)]
                out["speech_request_failures"] = len(failed)
                out["speech_start_s"] = round(await wait_speaking(live, 10, 30), 2)
                out["speech_setup_s"] = round(time.monotonic() - t, 1)
            phase("speaking")
            await asyncio.sleep(1.0)
            pool: dict[str, list[np.ndarray]] = {"quiet": [], "talk": []}
            rows: list[TurnResult] = []
            out["windows"] = []
            for n in range(1, args.rounds + 1):
                out["windows"].append({"kind": "quiet", "round": n, **await window(
                    "quiet", n, live, args, args.quiet_window, pool)})
                stop = asyncio.Event()
                tasks = [asyncio.create_task(talk(t, i, stop, rows))
                         for i, t in enumerate(talkers)]
                # the first questions end ~2 s in: from then on decodes run all the time
                await asyncio.sleep(args.talk_lead)
                out["windows"].append({"kind": "talk", "round": n, **await window(
                    "talk", n, live, args, args.talk_window, pool)})
                stop.set()  # each talker finishes its question and its reply, then stops
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
                await asyncio.sleep(0.5)
            out["pooled"] = {kind: pooled(arrays) for kind, arrays in pool.items()}
            out["turns"] = [r.as_json() for r in rows]
            ms = sorted(r.client_ms for r in rows if r.client_ms is not None)
            out["talkers_summary"] = {
                "questions": len(rows),
                "final_transcripts": sum(bool(r.transcript) for r in rows),
                "audible_replies": len(ms),
                "end_of_speech_to_audible_ms_median": ms[len(ms) // 2] if ms else None,
                "end_of_speech_to_audible_ms_max": ms[-1] if ms else None,
                "partials": sum(len([e for e in t.of("transcript") if not e["final"]])
                                for t in talkers),
            }
        finally:
            await asyncio.gather(*(t.close() for t in talkers), return_exceptions=True)
            await bounded(listeners, lambda s: s.close(), 50)
    phase("done")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--listeners", type=int, default=200)
    p.add_argument("--talkers", type=int, default=10)
    p.add_argument("--batch", type=int, default=20, help="listeners connecting at a time")
    p.add_argument("--text", default="listen", help="what the listeners hear (one phrase)")
    p.add_argument("--voice", default=None, help="... in this voice (default: the gateway's)")
    p.add_argument("--utterances", type=int, default=8,
                   help="speech requests per listener, back to back (0: the keep-alive only)")
    p.add_argument("--rounds", type=int, default=2, help="quiet + talking window pairs")
    p.add_argument("--quiet-window", type=float, default=6.0)
    p.add_argument("--talk-lead", type=float, default=2.5,
                   help="s from the talkers' start to the talking window")
    p.add_argument("--talk-window", type=float, default=8.0)
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    args.url = args.url.rstrip("/")
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    result = asyncio.run(run(args))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
