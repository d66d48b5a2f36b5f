"""First audio after the first text chunk, over the ElevenLabs-compatible WebSocket (Piper).

    python -m bench.elevenlabs_first_audio [--runs 15] [--rate 30]

The gateway runs as its own process (``python -m gateway --voice piper``); this client opens
one ``multi-stream-input`` socket and, per sentence, a context whose text it sends as an LLM
would: LLM-like tokens (a word with its leading space, or punctuation) at ``--rate`` tokens per
second, then ``flush`` + ``close_context``. Measured: first text chunk sent -> first audio
message received (median of ``--runs``, target <= 150 ms). Beside it, in the same run:

- ``text-ready``: when the first clause's text is complete at that pace (the part no
  synthesiser can beat: the first words have to be written first);
- ``whole-text``: the sentence in one message with ``flush`` (no pacing): synthesis of the
  first clause + the wire, the floor for this voice on this machine;
- ``first_words=3`` / ``=0``: the same paced run with the first clause after three words (the
  default until 2026-12-02: the baseline), and with the segmenter's usual first cut (waits to
  see whether the first sentence runs past its word limit) instead of the eager one.

JSON in bench/results/elevenlabs_first_audio.json, and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import time
from typing import Any

import aiohttp

from bench.common import gateway_process, pct, write_results
from bench.latency import SENTENCES
from gateway.elevenlabs.context import EAGER_FIRST_WORDS
from gateway.text.segmenter import Segmenter

TARGET_MS = 150.0
EXTRA = [
    "Let me look that up for you, it should only take a second.",
    "Absolutely, your table for four is booked at seven tonight.",
    "I am sorry to hear that, let us see what we can do.",
    "The next train to the airport leaves in twelve minutes.",
    "Great question, the short answer is yes.",
]


def tokens(text: str) -> list[str]:
    return re.findall(r"\s*\w+|\s*[^\w\s]+", text)


def text_ready_ms(text: str, rate: float, first_words: int) -> float:
    """When, at ``rate`` tokens/s, the segmenter has its first clause (after the token that
    completes it; token 0 is sent at 0 ms)."""
    seg = Segmenter(eager_first_words=first_words)
    for i, tok in enumerate(tokens(text)):
        if seg.feed(tok):
            return i * 1000 / rate
    return len(tokens(text)) * 1000 / rate


async def one(ws: aiohttp.ClientWebSocketResponse, ctx: str, text: str, rate: float | None
              ) -> float:
    await ws.send_json({"text": " ", "context_id": ctx, "voice_settings": {}})
    first: float | None = None
    started = time.perf_counter()

    async def feed() -> None:
        if rate is None:
            await ws.send_json({"text": text, "context_id": ctx, "flush": True})
        else:
            for i, tok in enumerate(tokens(text)):
                delay = started + i / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await ws.send_json({"text": tok, "context_id": ctx})
            await ws.send_json({"text": "", "context_id": ctx, "flush": True})
        await ws.send_json({"context_id": ctx, "close_context": True})

    feeder = asyncio.create_task(feed())
    async for msg in ws:
        data = json.loads(msg.data)
        if data.get("audio") and first is None:
            first = (time.perf_counter() - started) * 1000
        if data.get("isFinal") and data.get("contextId") == ctx:
            break
    await feeder
    assert first is not None, "no audio"
    return first


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "p90": pct(values, 90), "n": len(values)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rate", type=float, default=30.0, help="tokens per second")
    args = parser.parse_args()
    texts = [[*SENTENCES, *EXTRA][i % (len(SENTENCES) + len(EXTRA))] for i in range(args.runs)]
    rows: dict[str, list[float]] = {"paced": [], "paced first_words=3": [],
                                    "paced first_words=0": [], "whole-text": []}
    ready = {"paced": [text_ready_ms(t, args.rate, EAGER_FIRST_WORDS) for t in texts],
             "paced first_words=3": [text_ready_ms(t, args.rate, 3) for t in texts],
             "paced first_words=0": [text_ready_ms(t, args.rate, 0) for t in texts]}
    async with gateway_process(["piper"]) as url, aiohttp.ClientSession() as http:
        base = url.replace("http", "ws") + "/v1/text-to-speech/joe/multi-stream-input"
        for name, query, rate in (("paced", "", args.rate),
                                  ("paced first_words=3", "&first_words=3", args.rate),
                                  ("paced first_words=0", "&first_words=0", args.rate),
                                  ("whole-text", "", None)):
            async with http.ws_connect(f"{base}?output_format=pcm_24000{query}") as ws:
                await one(ws, "warm", "Warming up.", None)
                for i, text in enumerate(texts):
                    rows[name].append(await one(ws, f"c{i}", text, rate))
    load = os.getloadavg()
    result = {"rate_tokens_per_s": args.rate, "load_average": load, "target_ms": TARGET_MS,
              "rows": {k: summary(v) for k, v in rows.items()},
              "text_ready": {k: summary(v) for k, v in ready.items()}, "runs": rows}
    path = write_results("elevenlabs_first_audio", result)
    print(f"{'first audio after first chunk':34} {'median':>7} {'p90':>7} {'text-ready':>10}")
    for name, r in result["rows"].items():
        tr = result["text_ready"].get(name, {}).get("median")
        tr_s = f"{tr:10.0f}" if tr is not None else f"{'-':>10}"
        print(f"{name:34} {r['median']:7.0f} {r['p90']:7.0f} {tr_s}")
    print(f"load average {load[0]:.2f} at the end of the run")
    print(f"target: paced median <= {TARGET_MS:.0f} ms at {args.rate:g} tokens/s; "
          f"whole-text is the synthesis + wire floor; {args.runs} sentences each")
    print(f"JSON: {path}")


if __name__ == "__main__":
    asyncio.run(main())
