"""Say -> first audible packet at the client, per voice backend, and for a phrase-cache hit.

    python -m bench.tts_latency [--runs 15]

The gateway runs as its own process (``python -m gateway``), and so does the CosyVoice stand-in
(``python -m gateway.testing.cosyvoice_server``, 24 kHz, HTTP and gRPC), once with no
first-chunk delay and once with 150 ms; the headless client is here. For each voice a session
speaks a series of sentences, waiting for the stream to go idle between them (as
``bench.latency`` does). Rows:
- piper: the embedded voice (target: median <= 120 ms),
- cosyvoice-{http,grpc}-{0,150}ms: the stand-in. ``upstream_ms`` is the stand-in's own time to
  its first chunk (its first-chunk delay plus rendering the text), measured by calling it
  directly with the same backend from here; ``overhead_ms`` = median say -> first audio minus
  median upstream_ms: what the gateway adds above the upstream (target <= 5 ms),
- cache-hit: sentences already spoken through the 150 ms stand-in, said again and served from
  the phrase cache (target <= 25 ms).
Synthesis rows run on a gateway with the phrase cache off, so repeats are really synthesised.
JSON in bench/results/tts_latency.json, and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
from collections.abc import AsyncIterator
from typing import Any

from bench.common import free_port, gateway_process, pct, speak_series, write_results
from bench.latency import SENTENCES
from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.tts.registry import build_cosyvoice

DELAYS_MS = (0, 150)
TARGETS = {"piper_ms": 120.0, "cosyvoice_overhead_ms": 5.0, "cache_hit_ms": 25.0}


@contextlib.asynccontextmanager
async def standin_process(first_chunk_delay_ms: float) -> AsyncIterator[tuple[int, int]]:
    """The stand-in CosyVoice server in its own process; yields its (http, grpc) ports."""
    http_port, grpc_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.testing.cosyvoice_server", "--http-port", str(http_port),
        "--grpc-port", str(grpc_port), "--rate", "24000",
        "--first-chunk-delay-ms", str(first_chunk_delay_ms),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30)  # printed once serving
        if b"CosyVoice stand-in" not in line:
            raise RuntimeError(f"stand-in did not start: {line!r}")
        yield http_port, grpc_port
    finally:
        proc.terminate()
        await proc.wait()


def summary(rows: list[dict], key: str) -> dict[str, float | None]:
    values = [r[key] for r in rows if r[key] is not None]
    return {
        "median": statistics.median(values) if values else None,
        "p90": pct(values, 90),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


async def measure(url: str, voice: str, texts: list[str], warm: list[str]) -> dict[str, Any]:
    client = GatewayClient(url, capture=True)  # speak_series reads the packets
    await client.connect()
    try:
        await speak_series(client, voice, warm)  # first-call paths, model caches
        rows = await speak_series(client, voice, texts)
    finally:
        await client.close()
    return {"voice": voice, "runs": rows,
            **{k: summary(rows, k) for k in ("first_audio_ms", "first_pcm_ms",
                                             "server_overhead_ms")}}


async def upstream_first_chunk_ms(spec: str, texts: list[str]) -> list[float]:
    """The stand-in's time to first chunk, asked directly (no gateway) with the same backend."""
    synth = build_cosyvoice(spec, "direct")
    loop = asyncio.get_running_loop()
    times = []
    try:
        for text in texts:
            started = loop.time()
            async with contextlib.aclosing(synth.stream(text)) as chunks:
                await anext(chunks)
                times.append((loop.time() - started) * 1000)
                async for _ in chunks:
                    pass
    finally:
        await synth.close()
    return times


def texts_for(runs: int) -> list[str]:
    return [SENTENCES[i % len(SENTENCES)] for i in range(runs)]


async def synthesis_rows(runs: int, with_piper: bool) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        voices = ["joe=piper"] if with_piper else []
        for delay in DELAYS_MS:
            http, grpc = await stack.enter_async_context(standin_process(delay))
            q = "spk_id=a&rate=24000"
            voices += [f"cosyvoice-http-{delay}ms=cosyvoice+http://127.0.0.1:{http}?{q}",
                       f"cosyvoice-grpc-{delay}ms=cosyvoice+grpc://127.0.0.1:{grpc}?{q}"]
        url = await stack.enter_async_context(
            gateway_process(voices, extra=["--phrase-cache-mb", "0"]))
        for spec in voices:
            name, target = spec.split("=", 1)
            results[name] = row = await measure(url, name, texts_for(runs), SENTENCES[-2:])
            if target.startswith("cosyvoice"):
                upstream = await upstream_first_chunk_ms(target, texts_for(runs))
                row["upstream_ms"] = summary([{"t": t} for t in upstream], "t")
                median = row["first_audio_ms"]["median"]
                row["overhead_ms"] = median - statistics.median(upstream)
    return results


async def cache_row(runs: int) -> dict[str, Any]:
    texts = texts_for(min(runs, len(SENTENCES)))
    name = "cosyvoice-http-150ms"
    async with contextlib.AsyncExitStack() as stack:
        http, _ = await stack.enter_async_context(standin_process(150))
        voice = f"{name}=cosyvoice+http://127.0.0.1:{http}?spk_id=a&rate=24000"
        url = await stack.enter_async_context(gateway_process([voice]))
        client = GatewayClient(url, capture=True)  # speak_series reads the packets
        await client.connect()
        try:
            misses = await speak_series(client, name, texts)  # synthesised and stored
            rows: list[dict] = []
            while len(rows) < runs:
                rows += await speak_series(client, name, texts[: runs - len(rows)])
        finally:
            await client.close()
    assert all(r["cached"] for r in rows), "a repeat was not served from the cache"
    return {"voice": name, "runs": rows, "first_audio_ms": summary(rows, "first_audio_ms"),
            "first_sent_ms": summary(rows, "first_sent_ms"),
            "miss_first_audio_ms": summary(misses, "first_audio_ms")}


def verdict(results: dict[str, Any]) -> dict[str, bool | None]:
    def median(name: str) -> float | None:
        row = results.get(name)
        return None if row is None else row["first_audio_ms"]["median"]

    overheads = [r["overhead_ms"] for n, r in results.items() if n.startswith("cosyvoice")]
    piper, hit = median("piper"), median("cache-hit")
    return {
        "piper_ok": None if piper is None else piper <= TARGETS["piper_ms"],
        "cosyvoice_overhead_ok": all(o is not None and o <= TARGETS["cosyvoice_overhead_ms"]
                                     for o in overheads),
        "cache_hit_ok": None if hit is None else hit <= TARGETS["cache_hit_ms"],
    }


def print_table(results: dict[str, Any], runs: int, verdicts: dict[str, bool | None]) -> None:
    def cell(value: float | None, width: int, digits: int = 1) -> str:
        return f"{'' if value is None else f'{value:.{digits}f}':>{width}}"

    print(f"{'row':<22} {'say->first audio':>17} {'p90':>7} {'min':>7} {'upstream':>9} "
          f"{'overhead':>9} {'PCM->RTP':>9}   (ms, median of {runs})")
    for name, r in results.items():
        fa = r["first_audio_ms"]
        upstream = r.get("upstream_ms", {}).get("median")
        server = r.get("server_overhead_ms", {}).get("median")
        print(f"{name:<22} {cell(fa['median'], 17)} {cell(fa['p90'], 7)} {cell(fa['min'], 7)} "
              f"{cell(upstream, 9)} {cell(r.get('overhead_ms'), 9)} {cell(server, 9, 2)}")
    print(f"targets: Piper <= {TARGETS['piper_ms']:g} ms: {verdicts['piper_ok']}; CosyVoice "
          f"overhead above the first-chunk delay <= {TARGETS['cosyvoice_overhead_ms']:g} ms: "
          f"{verdicts['cosyvoice_overhead_ok']}; cache hit <= {TARGETS['cache_hit_ms']:g} ms: "
          f"{verdicts['cache_hit_ok']}")


async def main(args: argparse.Namespace) -> None:
    from gateway.testing.cosyvoice_audio import piper_available

    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    with_piper = piper_available()
    results = await synthesis_rows(args.runs, with_piper)
    if with_piper:
        results = {"piper": results.pop("joe"), **results}
    results["cache-hit"] = await cache_row(args.runs)
    verdicts = verdict(results)
    path = write_results("tts_latency", {"runs": args.runs, "results": results,
                                         "targets": TARGETS, "verdict": verdicts})
    print_table(results, args.runs, verdicts)
    print(f"written {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    asyncio.run(main(parser.parse_args()))
