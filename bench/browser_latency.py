"""Latency where the listener is: real headless Chromium, each step of the chain measured.

    .venv/bin/python -m bench.browser_latency [--runs 8] [--gateway-arg=--flag ...]
    make bench-browser

The gateway runs as ``make run`` starts it (its own process, the embedded Piper voice first and
so the default, ``--duplex --agent echo``), except that its ICE host candidates are 127.0.0.1
only (Chromium takes them with ``--allow-loopback-in-peer-connection``: no bench traffic leaves
loopback), plus a CosyVoice stand-in voice (``gateway.testing.cosyvoice_server``, its own
process, 150 ms to its first chunk). Chromium (Debian's, via Playwright) loads a bench-only page
(``bench/pages/latency.html``, served by Playwright at the gateway's origin, not by the
gateway): a plain WHEP player whose remote track feeds an AudioWorklet onset detector.

**Clocks.** Page and gateway run on this machine: the page dates everything as
``performance.timeOrigin + performance.now()`` (Unix epoch ms), the gateway exports its
monotonic readings as Unix epoch ms (``*_timeline_unix_ms``, gateway/runtime/clock.py); both
are this machine's CLOCK_REALTIME, so one chain can mix them. ``clock_check_ms`` (the
gateway's arrival of a request minus the page's send) must stay small and positive.

**Connect** (trickle: the offer POSTed at once with no candidates, later ones PATCHed, as simple
WHEP players do; non-trickle: POSTed once gathering is complete): click -> offer made ->
(gathered) -> POST -> the gateway's request arrival -> answer -> ICE (and the nominated pair's
candidate types: a trickle offer's peer is peer-reflexive) -> DTLS -> first packet on the wire
(the gateway) -> first packet at Chromium (inbound-rtp ``lastPacketReceivedTimestamp``, polled
every 2 ms while it counts one packet). Target: median click -> first packet <= 100 ms each.

**Speech**, per utterance on one connected session, idle between utterances (a random phase of
the 20 ms grid): the page's request -> its arrival at the gateway -> synthesis started -> the
voice's first PCM -> first Opus frame queued -> first packet on the wire (slot wait: queued ->
sent) -> Chromium played it (``getSynchronizationSources``: the utterance's first RTP timestamp
delivered to the track, polled every 1 ms) -> audible onset (the first sample >= -34 dBFS in
the AudioWorklet, its frame on the audio clock mapped to the time it reaches the output by
``AudioContext.getOutputTimestamp``). Plus Chromium's jitterBufferDelay / target and the
media-playout delay over the utterance. Cases: the embedded voice (fresh sentences), the
CosyVoice stand-in, phrase-cache hits (the embedded voice's sentences said again). Targets:
embedded voice request -> onset median <= 120 ms and <= 40 ms above the voice's own time to
first PCM (started -> first PCM).

The first connect and the first utterance of each case are warm-ups (recorded, not counted).
A table is printed; JSON in bench/results/browser_latency.json (or ``--out NAME``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import gateway_process, pct, write_results
from bench.latency import SENTENCES
from bench.tts_latency import standin_process
from tests.browser.chromium import CHROMIUM, launch

PAGE = Path(__file__).resolve().parent / "pages" / "latency.html"
PAGE_PATH = "/__bench__/latency.html"
TARGETS = {"connect_first_packet_ms": 100.0, "embedded_onset_ms": 120.0,
           "embedded_above_first_pcm_ms": 40.0}
STANDIN_FIRST_CHUNK_MS = 150.0
#: what ``make run`` passes (the Makefile); ``--gateway-arg`` flags come after and override,
#: e.g. ``--gateway-arg=--idle-packets=dtx --gateway-arg=--early-first-frame``
MAKE_RUN_ARGS = ["--duplex", "--agent", "echo"]
MORE_SENTENCES = [
    "Let me look that up for you now.",
    "Your table for two is booked at seven.",
    "The next train leaves in twelve minutes.",
    "I have sent the receipt to your email.",
    "That item is back in stock this week.",
    "Your password was changed a moment ago.",
]


def _d(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


async def open_page(browser: Any, url: str) -> Any:
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(30_000)
    html = PAGE.read_text()

    async def serve(route: Any) -> None:
        await route.fulfill(status=200, content_type="text/html", body=html)

    await page.route(url + PAGE_PATH, serve)
    await page.goto(url + PAGE_PATH)
    await page.wait_for_function("() => window.bench?.ready")
    return page


async def connect_once(page: Any, url: str, trickle: bool, prepared: bool = False
                       ) -> dict[str, Any]:
    t = await page.evaluate("([u, tr, p]) => window.bench.connect(u, tr, p)",
                            [url, trickle, prepared])
    state = await page.evaluate("window.bench.session()")
    while state["connect_timeline_unix_ms"]["first_packet"] is None:  # not yet in the state
        state = await page.evaluate("window.bench.session()")
    gw = state["connect_timeline_unix_ms"]
    click = t["click"]
    await asyncio.sleep(0.25)  # a few more packets: the balance is not about the first only
    balance = await page.evaluate("window.bench.packetBalance()")
    return {
        "trickle": trickle,
        "prepared": prepared,
        "offer_created": _d(t["offerCreated"], click),
        "gathered": _d(t.get("gathered"), click),
        "offer_posted": _d(t["offerPosted"], click),
        "gw_request": _d(gw["request"], click),
        "gw_answer": _d(gw["answer"], click),
        "answer_at_page": _d(t["answer"], click),
        "answer_applied": _d(t["answerApplied"], click),
        "gw_ice": _d(gw["ice"], click),
        "gw_dtls": _d(gw["dtls"], click),
        "page_connected": _d(t.get("connected"), click),
        "gw_first_packet": _d(gw["first_packet"], click),
        "first_packet_ms": _d(t["firstPacket"], click),
        "first_packet_count": t["firstPacketCount"],
        # seen with n packets: the first came (n - 1) x 20 ms earlier (they are paced)
        "first_packet_est_ms": _d(t["firstPacket"] - (t["firstPacketCount"] - 1) * 20, click),
        # Chromium's received minus the gateway's sent, read just after: -1 = one never counted
        "packets_uncounted": balance["sent"] - balance["received"],
        "ice_pair": state.get("ice_pair"),
        "clock_check_ms": _d(gw["request"], t["offerPosted"]),
        "output_latency_ms": round((t["baseLatency"] + t["outputLatency"]) * 1000, 1),
    }


async def say_once(page: Any, text: str, voice: str | None) -> dict[str, Any]:
    t = await page.evaluate("([x, v]) => window.bench.say(x, v)", [text, voice])
    u = t["state"]
    gw = u["timeline_unix_ms"]
    req = t["request"]
    return {
        "text": text,
        "voice": u["voice"],
        "cached": u["cached"],
        "state": u["state"],
        "clock_check_ms": _d(gw["request"], req),
        # the chain, each step from the one before (ms)
        "http": _d(gw["request"], req),
        "to_start": _d(gw["started"], gw["request"]),
        "voice_first_pcm": _d(gw["first_pcm"], gw["started"]),
        "first_frame": _d(gw["first_frame_queued"], gw["first_pcm"] or gw["started"]),
        "slot_wait": _d(gw["first_sent"], gw["first_frame_queued"]),
        "wire_to_played": _d(t["played"], gw["first_sent"]),
        "played_to_onset": _d(t["onset"], t["played"]),
        # totals from the page's request
        "first_sent_ms": _d(gw["first_sent"], req),
        "played_ms": _d(t["played"], req),
        "onset_ms": _d(t["onset"], req),
        "onset_above_first_pcm_ms": _d(_d(t["onset"], req), _d(gw["first_pcm"], gw["started"])),
        "worklet_report_ms": _d(t["workletReported"], req),
        "jitter_buffer_ms": None if t["jitterBufferMs"] is None else round(t["jitterBufferMs"], 1),
        "jitter_buffer_target_ms": None if t["jitterBufferTargetMs"] is None
        else round(t["jitterBufferTargetMs"], 1),
        "playout_delay_ms": None if t["playoutDelayMs"] is None else round(t["playoutDelayMs"], 1),
        "concealed_samples": t["concealed"],
        "interarrival_jitter_ms": round(t["interarrivalJitterMs"], 2),
        "response_ms": _d(t["response"], req),
    }


def summary(rows: list[dict[str, Any]], key: str) -> dict[str, float | None]:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return {"median": None, "p90": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(values), 1), "p90": pct(values, 90),
            "min": min(values), "max": max(values), "n": len(values)}


#: (name, trickle, offer prepared before the click): a trickle player POSTs at once; a
#: non-trickle one waits for Chromium's gathering (its port-allocation phases) after the click,
#: unless, as the demo page does, it made and gathered its offer ahead.
CONNECT_CASES = [("trickle", True, False), ("non_trickle", False, False),
                 ("non_trickle_prepared", False, True)]
CONNECT_KEYS = ["offer_created", "gathered", "offer_posted", "gw_request", "gw_answer",
                "answer_at_page", "gw_ice", "gw_dtls", "page_connected", "gw_first_packet",
                "first_packet_ms", "first_packet_est_ms", "packets_uncounted",
                "clock_check_ms"]
SPEECH_KEYS = ["http", "to_start", "voice_first_pcm", "first_frame", "slot_wait",
               "wire_to_played", "played_to_onset", "first_sent_ms", "played_ms", "onset_ms",
               "onset_above_first_pcm_ms", "jitter_buffer_ms", "jitter_buffer_target_ms",
               "playout_delay_ms", "interarrival_jitter_ms", "clock_check_ms"]


async def speech_case(pages: list[Any], texts: list[str], voice: str | None, warm: str,
                      rng: random.Random) -> list[dict[str, Any]]:
    """The texts said on each page's session (with ``--ab``: both gateways, the same text one
    after the other, in a random order, so both sides see the same machine)."""
    async def one(page: Any, text: str) -> dict[str, Any]:
        # idle between utterances, and a random phase of the stream's 20 ms grid
        await asyncio.sleep(0.3 + rng.uniform(0, 0.020))
        return await say_once(page, text, voice)

    colds = [await one(page, warm) for page in pages]
    rows: list[list[dict[str, Any]]] = [[] for _ in pages]
    for text in texts:
        order = list(range(len(pages)))
        rng.shuffle(order)
        for i in order:
            rows[i].append(await one(pages[i], text))
    blocks = []
    for page, cold, side in zip(pages, colds, rows, strict=True):
        pacer = (await page.evaluate("window.bench.session()"))["pacer"]
        blocks.append({"cold": cold, "rows": side, "pacer": pacer, "load": load(),
                       **{k: summary(side, k) for k in SPEECH_KEYS}})
    return blocks


async def connect_case(pages: list[Any], urls: list[str], runs: int, trickle: bool,
                       prepared: bool, rng: random.Random) -> list[dict[str, Any]]:
    rows: list[list[dict[str, Any]]] = [[] for _ in pages]
    colds = []
    for page, url in zip(pages, urls, strict=True):
        colds.append(await connect_once(page, url, trickle, prepared))
        await page.evaluate("window.bench.close()")
    for _ in range(runs):
        order = list(range(len(pages)))
        rng.shuffle(order)
        for i in order:
            rows[i].append(await connect_once(pages[i], urls[i], trickle, prepared))
            await pages[i].evaluate("window.bench.close()")
    return [{"cold": cold, "rows": side, **{k: summary(side, k) for k in CONNECT_KEYS}}
            for cold, side in zip(colds, rows, strict=True)]


def paired(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, float | None]:
    """Median and range of B - A over the same texts (``--ab``)."""
    diffs = [y[key] - x[key] for x, y in zip(a["rows"], b["rows"], strict=True)
             if x.get(key) is not None and y.get(key) is not None]
    if not diffs:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": round(statistics.median(diffs), 1), "min": round(min(diffs), 1),
            "max": round(max(diffs), 1), "n": len(diffs)}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


async def main(runs: int, gateway_args: list[str], out: str, gateway_log: str | None,
               ab_args: list[str] | None = None, piper: str = "piper",
               ab_piper: str | None = None) -> int:
    if not CHROMIUM.exists():
        print(f"Chromium not installed at {CHROMIUM}; run .ci/install-debian.sh", file=sys.stderr)
        return 2
    from playwright.async_api import async_playwright

    version = (await asyncio.to_thread(
        subprocess.run, [str(CHROMIUM), "--version"], capture_output=True, text=True, check=False
    )).stdout.strip()
    rng = random.Random(17)
    load_before = load()
    result: dict[str, Any] = {"chromium": version, "runs": runs, "targets": TARGETS,
                              "gateway_args": [*MAKE_RUN_ARGS, *gateway_args],
                              "load_before": load_before}
    sides = [[*MAKE_RUN_ARGS, *gateway_args]]
    pipers = [piper]
    if ab_args is not None or ab_piper is not None:
        ab_args = ab_args or []
        sides.append([*MAKE_RUN_ARGS, *gateway_args, *ab_args])
        pipers.append(ab_piper or piper)
    async with contextlib.AsyncExitStack() as stack:
        port, _grpc = await stack.enter_async_context(standin_process(STANDIN_FIRST_CHUNK_MS))
        cosy = f"cosy=cosyvoice+http://127.0.0.1:{port}?spk_id=a&rate=24000"
        urls = []
        for i, (args, piper_spec) in enumerate(zip(sides, pipers, strict=True)):
            log_path = None if gateway_log is None else gateway_log + ("" if i == 0 else ".b")
            urls.append(await stack.enter_async_context(gateway_process(
                [piper_spec, cosy], extra=args, timeout=180, log_path=log_path,
            )))
        p = await stack.enter_async_context(async_playwright())
        browser = await launch(p)
        stack.push_async_callback(browser.close)
        pages = [await open_page(browser, url) for url in urls]

        connects: list[dict[str, Any]] = [{} for _ in sides]
        for name, trickle, prepared in CONNECT_CASES:
            blocks = await connect_case(pages, urls, runs, trickle, prepared, rng)
            for side, block in zip(connects, blocks, strict=True):
                side[name] = block

        for page, url in zip(pages, urls, strict=True):
            await connect_once(page, url, True)
        embedded = (SENTENCES + MORE_SENTENCES)[:runs]
        speech: list[dict[str, Any]] = [{} for _ in sides]
        for name, texts, voice, warm in (
            ("embedded", embedded, None, "Warming up the voice."),
            ("cosyvoice_standin", SENTENCES[:runs], "cosy", "Warming up the stand-in."),
            ("cache_hit", embedded, None, "Warming up the voice."),
        ):
            blocks = await speech_case(pages, texts, voice, warm, rng)
            for side, block in zip(speech, blocks, strict=True):
                side[name] = block
        for page in pages:
            await page.evaluate("window.bench.close()")
    result["connect"], result["speech"] = connects[0], speech[0]
    result["piper"] = piper
    if len(sides) > 1:
        result["b"] = {"gateway_args": sides[1], "piper": pipers[1], "connect": connects[1],
                       "speech": speech[1]}
        result["b_minus_a"] = {
            case: {key: paired(speech[0][case], speech[1][case], key)
                   for key in ("voice_first_pcm", "first_sent_ms", "played_ms", "onset_ms",
                               "wire_to_played", "jitter_buffer_ms")}
            for case in speech[0]
        }
    result["load_after"] = load()
    emb = speech[0]["embedded"]
    conn = connects[0]
    result["meets"] = {
        **{f"connect_{name}": conn[name]["first_packet_est_ms"]["median"]
           <= TARGETS["connect_first_packet_ms"] for name, _, _ in CONNECT_CASES},
        "embedded_onset": emb["onset_ms"]["median"] <= TARGETS["embedded_onset_ms"],
        "embedded_above_first_pcm": emb["onset_above_first_pcm_ms"]["median"]
        <= TARGETS["embedded_above_first_pcm_ms"],
    }
    path = write_results(out, result)
    print_tables(result)
    if len(sides) > 1:
        print(f"B ({' '.join(ab_args or [])} {pipers[1]}):")
        print_tables({**result, **result["b"]}, header=False)
        print("B - A, paired by text (median [min, max]):")
        for case, keys in result["b_minus_a"].items():
            print(f"  {case:<18}" + "  ".join(
                f"{k} {v['median']} [{v['min']}, {v['max']}]" for k, v in keys.items()))
    print(f"written to {path}")
    return 0


def _m(block: dict[str, Any], key: str) -> str:
    value = block[key]["median"]
    return "-" if value is None else f"{value:.1f}"


def print_tables(result: dict[str, Any], header: bool = True) -> None:
    if header:
        print(f"{result['chromium']}; medians of {result['runs']} (+1 warm-up each); "
              f"load {result['load_before']} -> {result['load_after']}; "
              f"gateway {' '.join(result['gateway_args'])}")
    print("connect, ms after the click:")
    print(f"{'case':<21}" + "".join(f"{k[:14]:>15}" for k in CONNECT_KEYS))
    for name, block in result["connect"].items():
        print(f"{name:<21}" + "".join(f"{_m(block, k):>15}" for k in CONNECT_KEYS))
    for name, block in result["connect"].items():
        pairs = {str(r["ice_pair"] and (r["ice_pair"]["local"], r["ice_pair"]["remote"]))
                 for r in block["rows"]}
        print(f"  {name}: nominated pair (local, remote) {', '.join(sorted(pairs))}")
    print("speech, ms (steps: each from the one before; totals: from the page's request):")
    print(f"{'case':<18}" + "".join(f"{k[:14]:>15}" for k in SPEECH_KEYS))
    for name, block in result["speech"].items():
        print(f"{name:<18}" + "".join(f"{_m(block, k):>15}" for k in SPEECH_KEYS))
    if header:
        print("targets met:", result["meets"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="measured runs per case (>= 8)")
    parser.add_argument("--gateway-arg", action="append", default=[],
                        help="a flag for the gateway (repeatable), e.g. --gateway-arg=--foo")
    parser.add_argument("--out", default="browser_latency", help="results file name")
    parser.add_argument("--gateway-log", help="keep the gateway's output in this file")
    parser.add_argument("--piper", default="piper", help="the embedded voice's spec")
    parser.add_argument("--ab-piper", metavar="SPEC",
                        help="B's embedded voice spec (with or without --ab), e.g. "
                        "piper?first_words=6")
    parser.add_argument("--ab", metavar="ARGS",
                        help="also run a second gateway with these extra flags (one string), "
                        "both measured alternately, the same texts, on the same machine; "
                        "B - A paired by text, e.g. --ab='--idle-packets silence'")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    ab = None if args.ab is None else shlex.split(args.ab)
    sys.exit(asyncio.run(main(args.runs, args.gateway_arg, args.out, args.gateway_log, ab,
                              args.piper, args.ab_piper)))
