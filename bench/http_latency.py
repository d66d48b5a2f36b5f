"""Phase ``latency`` of bench/http_stream.py: request -> first audio byte over HTTP.

The gateway runs as its own process (``python -m gateway``); so does the CosyVoice stand-in
(``python -m gateway.testing.cosyvoice_server``, 24 kHz, 150 ms first-chunk delay, started by
``bench.tts_latency.standin_process``). Each request is one raw-asyncio POST on a fresh
connection (bench/http_wire.py), timed from just before the TCP connect to the moment the
first audio unit is complete at the client: for ``opus`` (``POST /v1/audio/speech``,
``response_format=opus``) the first Ogg page after the OpusHead and OpusTags pages, for
``frames`` (``POST /v1/speech/stream``) the first frame record. ``pace`` is ``asap`` (the
OpenAI default); every response is read to its end before the next request.

Rows (each route, ``--runs`` requests over bench.latency's ten sentences, after two warm-up
requests):
- ``piper``: the embedded voice, phrase cache off so every request is synthesised;
  ``backend_ms`` is Piper's own first chunk, measured here in-process after the gateway runs;
- ``cosyvoice-150ms``: the stand-in over HTTP, phrase cache off; ``backend_ms`` is the
  stand-in's own first chunk through the same client code, asked directly (no gateway);
- ``cache-hit``: a gateway with the phrase cache on: each sentence said once (a miss), then
  said again (a hit: replayed from already-encoded frames, no synthesis).
``overhead_ms`` = median first audio - median backend first chunk: what the gateway adds.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.common import gateway_process, pct
from bench.http_wire import first_audio
from bench.latency import SENTENCES

ROUTES = {"frames": ("/v1/speech/stream", "frames"), "opus": ("/v1/audio/speech", "ogg")}
STANDIN_DELAY_MS = 150.0


def body(route: str, text: str, voice: str) -> dict[str, Any]:
    if route == "frames":
        return {"text": text, "voice": voice, "pace": "asap"}
    return {"model": "tts-1", "input": text, "voice": voice, "response_format": "opus"}


def summary(values: list[float]) -> dict[str, float | None]:
    return {
        "median": round(statistics.median(values), 2) if values else None,
        "p90": pct(values, 90),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "n": len(values),
    }


def texts_for(runs: int) -> list[str]:
    return [SENTENCES[i % len(SENTENCES)] for i in range(runs)]


async def series(port: int, voice: str, route: str, texts: list[str]) -> list[dict[str, Any]]:
    path, kind = ROUTES[route]
    rows = []
    for text in texts:
        row = await first_audio("127.0.0.1", port, path, body(route, text, voice), kind)
        if row["status"] != 200 or row["first_audio_ms"] is None or not row["ended"]:
            raise RuntimeError(f"{voice}/{route}: bad response {row}")
        rows.append(row)
    return rows


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def piper_backend_ms(texts: list[str]) -> list[float]:
    """Piper's own request -> first PCM chunk, in this process (the gateway's code path)."""
    from gateway.tts.piper_voice import PiperSynthesizer

    voice = PiperSynthesizer()
    times = []
    for text in [*SENTENCES[-2:], *texts]:  # the first two warm the model up
        started = time.monotonic()
        async with contextlib.aclosing(voice.stream(text)) as chunks:
            await anext(chunks)
            times.append((time.monotonic() - started) * 1000)
    return times[2:]


async def latency_phase(
    runs: int, log: Callable[[str], None], warmups: int = 2
) -> dict[str, Any]:
    from bench.tts_latency import standin_process, upstream_first_chunk_ms
    from gateway.testing.cosyvoice_audio import piper_available

    texts = texts_for(runs)
    warm = SENTENCES[len(SENTENCES) - warmups :]
    rows: dict[str, dict[str, Any]] = {}
    cache_stats: Any = None
    with_piper = piper_available()
    async with contextlib.AsyncExitStack() as stack:
        http_port, _ = await stack.enter_async_context(standin_process(STANDIN_DELAY_MS))
        cosy = f"cosyvoice+http://127.0.0.1:{http_port}?spk_id=a&rate=24000"
        voices = {"cosyvoice-150ms": cosy}
        if with_piper:
            voices = {"piper": "piper", **voices}
        url = await stack.enter_async_context(gateway_process(
            [f"{name}={spec}" for name, spec in voices.items()],
            extra=["--phrase-cache-mb", "0"],
        ))
        for name in voices:
            for route in ROUTES:
                log(f"latency: {name} / {route} x {runs}")
                await series(port_of(url), name, route, warm)
                got = await series(port_of(url), name, route, texts)
                rows[f"{name}/{route}"] = {"voice": name, "route": route, "runs": got}
        log("latency: the stand-in's own first chunk (direct)")
        cosy_backend = await upstream_first_chunk_ms(cosy, texts)
    piper_backend = await piper_backend_ms(texts) if with_piper else []
    for row in rows.values():
        backend = piper_backend if row["voice"] == "piper" else cosy_backend
        row["backend_ms"] = summary(backend)
    if with_piper:
        async with gateway_process(["piper=piper"]) as url:
            port = port_of(url)
            distinct = texts[: min(runs, len(SENTENCES))]
            for route in ROUTES:
                log(f"latency: cache-hit / {route} x {runs}")
                misses = await series(port, "piper", route, distinct)  # stored (or already)
                got = await series(port, "piper", route, texts)
                rows[f"cache-hit/{route}"] = {"voice": "cache-hit", "route": route,
                                              "runs": got, "misses": misses}
            cache_stats = await get_json(f"{url}/v1/cache")
    for row in rows.values():
        row["first_audio_ms"] = summary([r["first_audio_ms"] for r in row["runs"]])
        row["first_body_ms"] = summary([r["first_body_ms"] for r in row["runs"]])
        backend = (row.get("backend_ms") or {}).get("median")
        median = row["first_audio_ms"]["median"]
        row["overhead_ms"] = None if backend is None else round(median - backend, 2)
    return {"piper_installed": with_piper, "standin_first_chunk_delay_ms": STANDIN_DELAY_MS,
            "cache_stats": cache_stats, "rows": rows}


async def get_json(url: str) -> Any:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return await r.json(content_type=None)
