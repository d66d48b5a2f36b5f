"""Where a WebRTC session's memory goes: the Python heap per added session, by file, by line,
and the owners of its asyncio Events and Queues (issue 28's RSS lever, made visible).

The gateway runs in this process (so ``tracemalloc`` and ``gc`` can see it, tone voices, the
defaults otherwise); the listeners are ``bench.loadgen`` in a child process (recvonly offers
through the public API, header-only receive). Two snapshots: before any session, and once
``--sessions`` are connected and settled (silent, or ``--speaking``: every session replaying
a phrase-cache hit, four queued back to back, as the load bench's speaking sessions do -- one
session speaks the phrase to the end before the first snapshot, so the cache holds it).
``gc.unfreeze()`` first: the gateway's GC policy freezes long-lived objects into the permanent
generation, which ``gc.get_objects`` does not list. The heap figure is
Python's allocations only; RSS per session (with the C side: libsrtp, OpenSSL, libopus) is the
load bench's (``bench.load``, "RSS / stream"), printed there beside its target.

    python -m bench.session_memory --sessions 100 [--speaking]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import re
import subprocess
import sys
import tracemalloc
import types
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.common import machine, write_results
from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.api.routes import REGISTRY
from gateway.api.timeouts import connection_limits, guard_runner, serve_options
from gateway.client.peer import GatewayClient
from gateway.config import GatewayConfig
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

PHRASE = "This is the benchmark phrase every session repeats."
TARGET_KB = 100  # issue 28: RSS per added session, speaking and silent
_KINDS = {"asyncio.Event": asyncio.Event, "asyncio.Queue": asyncio.Queue}


def _name(obj: object) -> str:
    kind = type(obj)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}"


def owners(kind: type, skip: list[Any]) -> collections.Counter[str]:
    """Who holds each live ``kind``: the owning object's type (an attribute of it), a container,
    or a cell (a closure or a suspended coroutine's variable)."""
    found = [o for o in gc.get_objects() if isinstance(o, kind)]
    skip = [*skip, found]
    counts: collections.Counter[str] = collections.Counter()
    for obj in found:
        for ref in gc.get_referrers(obj):
            if any(ref is s for s in skip) or isinstance(ref, types.FrameType):
                continue
            if isinstance(ref, dict):
                holders = [h for h in gc.get_referrers(ref) if getattr(h, "__dict__", None) is ref]
                counts[_name(holders[0]) if holders else "<dict>"] += 1
            elif type(ref).__name__ == "cell":
                counts["<cell>"] += 1
            else:
                counts[_name(ref)] += 1
    return counts


async def warm_phrase(url: str) -> None:
    """Speak ``PHRASE`` once to the end: the phrase cache then holds it for every session."""
    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    async with aiohttp.ClientSession() as http:
        client = GatewayClient(url, http)
        await client.connect()
        try:
            spoken = await client.say(PHRASE)
            state = await client.wait_utterance(spoken.utterance["id"])
            if state.get("state") != "done":
                raise SystemExit(f"the warm-up phrase did not play: {state}")
        finally:
            await client.close()


def census() -> dict[str, collections.Counter[str]]:
    gc.unfreeze()
    gc.collect()
    return {name: owners(kind, []) for name, kind in _KINDS.items()}


def _short(filename: str) -> str:
    """site-packages/aiortc/sdp.py -> aiortc/sdp.py; the stdlib's -> asyncio/locks.py."""
    for marker in ("site-packages/", str(Path.cwd()) + "/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return re.sub(r".*/lib/python3\.\d+/", "", filename)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    tracemalloc.start(1)
    config = GatewayConfig(host="127.0.0.1", port=0, ice_hosts=("127.0.0.1",))
    voices = VoiceRegistry([ToneSynthesizer(name="tone", frequency=440.0, seconds=6.0,
                                            sample_rate=24_000)])
    app = create_app(config, voices)
    limits = connection_limits(config)
    runner = web.AppRunner(app, handler_cancellation=True, **serve_options(limits))
    await runner.setup()
    guard_runner(runner, limits)
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    if args.speaking:
        await warm_phrase(url)
    before = census()
    heap0 = tracemalloc.take_snapshot()
    cmd = [sys.executable, "-m", "bench.loadgen", "--url", url, "--text", PHRASE,
           "--utterances", "4",
           "--server-pid", str(os.getpid()), "--sessions", str(args.sessions), "--full", "0",
           "--silent-window", "1" if args.speaking else str(args.settle + 60), "--window", "60"]
    if not args.speaking:
        cmd.append("--no-speech")
    generator = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        sessions = app[REGISTRY]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + args.connect_timeout
        while len(sessions) < args.sessions:
            if loop.time() > deadline or generator.poll() is not None:
                raise SystemExit(f"only {len(sessions)} of {args.sessions} sessions connected")
            await asyncio.sleep(0.25)
        await asyncio.sleep(args.settle)  # connected, DTLS done and released; speech under way
        live = len(sessions)
        after = census()
        heap1 = tracemalloc.take_snapshot()
    finally:
        generator.kill()
        generator.wait()
        await runner.cleanup()
    n = live
    by_file = heap1.compare_to(heap0, "filename")
    by_line = heap1.compare_to(heap0, "lineno")
    return {
        "machine": machine(), "sessions": n, "speaking": args.speaking,
        "heap_kb_per_session": round(sum(s.size_diff for s in by_file) / n / 1024, 2),
        "target_rss_kb": TARGET_KB,
        "by_file": [(_short(s.traceback[0].filename), round(s.size_diff / n / 1024, 2))
                    for s in by_file[:args.top]],
        "by_line": [(f"{_short(s.traceback[0].filename)}:{s.traceback[0].lineno}",
                     round(s.size_diff / n / 1024, 2)) for s in by_line[:args.top]],
        "owners": {kind: {k: round(v / n, 2) for k, v in (after[kind] - before[kind]).most_common()}
                   for kind in _KINDS},
    }


def report(result: dict[str, Any]) -> None:
    mode = "speaking" if result["speaking"] else "silent"
    print(f"\n{result['sessions']} {mode} sessions: Python heap {result['heap_kb_per_session']} KB "
          f"per session (RSS target {result['target_rss_kb']} KB, C side included: bench.load)")
    for title, rows in (("by file", result["by_file"]), ("by line", result["by_line"])):
        print(f"\n| KB / session | {title} |\n|---:|---|")
        for where, kb in rows:
            print(f"| {kb:.2f} | {where} |")
    for kind, counts in result["owners"].items():
        print(f"\n| {kind}s / session | held by |\n|---:|---|")
        for holder, count in counts.items():
            print(f"| {count:.2f} | {holder} |")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--speaking", action="store_true", help="every session speaking a tone")
    parser.add_argument("--settle", type=float, default=8.0, help="s after the last connects")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out", default="session-memory")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args))
    report(result)
    path = write_results(f"{args.out}-{'speaking' if args.speaking else 'silent'}", result)
    print(f"\nJSON: {path}")
    return result


if __name__ == "__main__":
    main()
