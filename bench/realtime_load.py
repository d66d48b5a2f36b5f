"""Many Realtime WebSocket sessions at once: N SDK connections (``openai``'s
``realtime.connect``) stream microphone audio in real time -- silence, with one in ten
speaking an espeak-ng question at a time, in turns -- and the echo agent answers each
question. Reported: the gateway's event-loop stalls over ``--stall-ms`` (its own
``--stall-warn-ms`` watch; target: none over 20 ms) beside the same gateway's stalls while idle
for as long (the machine's floor, measured first in the same run), the gateway's RSS per
session (after the sessions opened minus before), its CPU, and how many questions got a reply.

    python -m bench.realtime_load [--sessions 50] [--seconds 30] [--chunk-ms 100] [--quick]

Results: bench/results/realtime_load.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from bench import procstats
from bench.common import write_results
from bench.duplex import gateway
from bench.duplex_peer import QUESTIONS, question_audio
from bench.realtime import to24k

TARGET_STALL_MS = 20.0


class Mic:
    """One connection: ``chunk_ms`` of audio every ``chunk_ms``, silence unless told to speak."""

    def __init__(self, conn: Any, chunk_ms: int) -> None:
        self.conn, self.chunk = conn, 24 * chunk_ms
        self.chunk_ms = chunk_ms
        self.speech: np.ndarray | None = None
        self.replies = 0
        self.errors = 0
        self.tasks = [asyncio.create_task(self._send()), asyncio.create_task(self._read())]

    async def _send(self) -> None:
        silence = np.zeros(self.chunk, dtype="<i2").tobytes()
        started, n = time.monotonic(), 0
        while True:
            data = silence
            if self.speech is not None:
                piece, rest = self.speech[:self.chunk], self.speech[self.chunk:]
                self.speech = rest if rest.size else None
                data = np.pad(piece, (0, self.chunk - piece.size)).astype("<i2").tobytes()
            await self.conn.input_audio_buffer.append(audio=base64.b64encode(data).decode())
            n += 1
            await asyncio.sleep(max(0.0, started + n * self.chunk_ms / 1000 - time.monotonic()))

    async def _read(self) -> None:
        async for event in self.conn:
            if event.type == "response.done":
                self.replies += 1
            elif event.type == "error":
                self.errors += 1

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self.conn.close()


async def health(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/healthz") as r:
        return dict(await r.json())


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import openai

    questions = [to24k(np.concatenate((question_audio(q), np.zeros(8000, np.int16))))
                 for q in QUESTIONS[:5]]
    tmp = Path(tempfile.mkdtemp(prefix="bench-realtime-load-"))
    args.gateway_arg = [*args.gateway_arg, "--stall-warn-ms", str(args.stall_ms)]
    async with contextlib.AsyncExitStack() as stack:
        url, proc = await stack.enter_async_context(
            gateway("echo", args, tmp, "realtime-load", max_sessions=args.sessions + 5))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        await asyncio.sleep(1.0)
        idle0 = (await health(http, url)).get("stalls") or {}
        await asyncio.sleep(args.seconds)  # the floor: the idle gateway, as long
        idle1 = (await health(http, url)).get("stalls") or {}
        rss0 = procstats.rss_kb(proc.pid)
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        mics: list[Mic] = []
        for _ in range(args.sessions):
            conn = await sdk.realtime.connect(model="m", max_retries=0).enter()
            mics.append(Mic(conn, args.chunk_ms))
        for mic in mics:
            stack.push_async_callback(mic.close)
        await asyncio.sleep(2.0)
        rss1 = procstats.rss_kb(proc.pid)
        busy0 = (await health(http, url)).get("stalls") or {}
        cpu0 = procstats.cpu_sample(proc.pid)
        started, asked, turn = time.monotonic(), 0, 0
        talkers = max(1, args.sessions // 10)
        while time.monotonic() - started < args.seconds:
            for k in range(talkers):  # one in ten speaks, a different tenth each turn
                mic = mics[(turn * talkers + k) % len(mics)]
                mic.speech = questions[(turn + k) % len(questions)]
                asked += 1
            turn += 1
            await asyncio.sleep(4.0)
        await asyncio.sleep(3.0)
        cpu = procstats.cpu_percent(cpu0, procstats.cpu_sample(proc.pid))
        busy1 = (await health(http, url)).get("stalls") or {}
        rss2 = procstats.rss_kb(proc.pid)
    return {
        "sessions": args.sessions, "seconds": args.seconds, "chunk_ms": args.chunk_ms,
        "stall_threshold_ms": args.stall_ms,
        "idle_stalls": (idle1.get("count", 0) or 0) - (idle0.get("count", 0) or 0),
        "idle_max_stall_ms": idle1.get("max_ms"),
        "loaded_stalls": (busy1.get("count", 0) or 0) - (busy0.get("count", 0) or 0),
        "loaded_max_stall_ms": busy1.get("max_ms"),
        "rss_kb": {"before": rss0, "sessions_open": rss1, "end": rss2},
        "rss_per_session_kb": round((rss1 - rss0) / args.sessions, 1),
        "gateway_cpu_pct": round(cpu, 1),
        "questions": asked, "replies": sum(m.replies for m in mics),
        "errors": sum(m.errors for m in mics),
        "loadavg": procstats.load_average(),
        "target_max_stall_ms": TARGET_STALL_MS,
    }


def report(r: dict[str, Any]) -> None:
    print(f"\n{r['sessions']} Realtime WebSocket sessions, {r['seconds']} s, "
          f"{r['chunk_ms']} ms appends, one in ten talking")
    print(f"  loop stalls over {r['stall_threshold_ms']:.0f} ms: {r['loaded_stalls']} loaded "
          f"(max {r['loaded_max_stall_ms']} ms over the whole run) vs {r['idle_stalls']} idle "
          f"(max {r['idle_max_stall_ms']} ms)   target: none over {TARGET_STALL_MS:.0f} ms")
    print(f"  RSS per session: {r['rss_per_session_kb']} KB ({r['rss_kb']})")
    print(f"  gateway CPU {r['gateway_cpu_pct']} %, questions {r['questions']}, replies "
          f"{r['replies']}, errors {r['errors']}, load {r['loadavg']}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--chunk-ms", type=int, default=100)
    p.add_argument("--stall-ms", type=float, default=TARGET_STALL_MS)
    p.add_argument("--voice", default="piper")
    p.add_argument("--phrase-cache", action="store_true")
    p.add_argument("--gateway-arg", action="append", default=[], metavar="ARG")
    p.add_argument("--quick", action="store_true", help="10 sessions, 10 s")
    args = p.parse_args(argv)
    if args.quick:
        args.sessions, args.seconds = 10, 10.0
    result = asyncio.run(run(args))
    report(result)
    print(f"wrote {write_results('realtime_load', result)}")
    return result


if __name__ == "__main__":
    main()
