"""Click Connect -> first audio packet in real headless Chromium, through the demo page.

The gateway runs as its own process (``python -m gateway``, tone voices, host candidates on
127.0.0.1); Chromium (Debian's, via Playwright) loads the demo page from it. Each run opens a fresh
page, waits until the page has its offer ready (as it would be long before a person clicks),
clicks Connect and reads the page's own timing (``window.gatewayDemo.timing``):

- first_packet_ms: the click -> arrival of the first RTP packet, dated by Chromium's inbound-rtp
  ``lastPacketReceivedTimestamp`` on the first stats poll that sees a packet (polled every 4 ms;
  when that poll already sees more than one packet the time is that of the latest, so the figure
  is an upper bound);
- offer_posted_ms / answer_ms / connected_ms: where that time goes;
- speak_to_sound_ms: click Speak -> the page's AnalyserNode hears the tone (includes Chromium's
  jitter buffer and audio rendering).

The first run in a fresh browser pays one-off costs (audio device, WebRTC stack start-up); it is
recorded as ``cold`` and left out of the statistics. Target: median first_packet_ms <= 100.

    .venv/bin/python -m bench.browser_latency [--runs 9]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
from typing import Any

from bench.common import gateway_process, pct, write_results
from tests.browser.chromium import CHROMIUM, launch

TARGET_MS = 100.0
VOICES = ["tone=tone:440?seconds=1"]


async def one_run(browser: Any, url: str) -> dict[str, Any]:
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(30_000)
    try:
        await page.goto(url + "/")
        await page.wait_for_function(
            "() => window.gatewayDemo?.ready && window.gatewayDemo.prepared?.gathered"
        )
        await page.click("#connect")
        await page.wait_for_function("() => window.gatewayDemo.timing.firstPacketAt !== null")
        t = await page.evaluate("window.gatewayDemo.timing")
        await page.fill("#text", "A tone, please.")
        await page.click("#speak")
        await page.wait_for_function("() => window.gatewayDemo.lastSpeak?.ms != null")
        speak_ms = await page.evaluate("window.gatewayDemo.lastSpeak.ms")
        await page.click("#disconnect")
    finally:
        await context.close()

    def since_click(key: str) -> float | None:
        return None if t.get(key) is None else round(t[key] - t["clickedAt"], 1)

    return {
        "first_packet_ms": round(t["firstPacketMs"], 1),
        "packets_at_first_poll": t.get("firstPacketCount"),
        "offer_posted_ms": since_click("offerPostedAt"),
        "answer_ms": since_click("answerAt"),
        "connected_ms": since_click("connectedAt"),
        "first_packet_seen_ms": since_click("firstPacketSeenAt"),
        "speak_to_sound_ms": round(speak_ms, 1),
    }


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 1), "p90": pct(values, 90),
            "min": min(values), "max": max(values)}


async def main(runs: int) -> int:
    if not CHROMIUM.exists():
        print(f"Chromium not installed at {CHROMIUM}; run .ci/install-browser.sh", file=sys.stderr)
        return 2
    from playwright.async_api import async_playwright

    version = (await asyncio.to_thread(
        subprocess.run, [str(CHROMIUM), "--version"], capture_output=True, text=True, check=False
    )).stdout.strip()
    async with gateway_process(VOICES) as url, async_playwright() as p:
        browser = await launch(p)
        try:
            cold = await one_run(browser, url)
            rows = [await one_run(browser, url) for _ in range(runs)]
        finally:
            await browser.close()

    first = [r["first_packet_ms"] for r in rows]
    speak = [r["speak_to_sound_ms"] for r in rows]
    result = {
        "chromium": version,
        "runs": runs,
        "target_ms": TARGET_MS,
        "first_packet_ms": summary(first),
        "speak_to_sound_ms": summary(speak),
        "meets_target": statistics.median(first) <= TARGET_MS,
        "cold": cold,
        "rows": rows,
    }
    path = write_results("browser_latency", result)
    print(f"{version}; {runs} runs (+1 cold run, not counted)")
    print(f"{'run':>4} {'posted':>7} {'answer':>7} {'connected':>9} {'first pkt':>9} "
          f"{'speak->sound':>12}")
    for i, r in enumerate([cold, *rows]):
        label = "cold" if i == 0 else str(i)
        print(f"{label:>4} {r['offer_posted_ms']:>7} {r['answer_ms']:>7} {r['connected_ms']:>9} "
              f"{r['first_packet_ms']:>9} {r['speak_to_sound_ms']:>12}")
    print(f"click -> first audio packet: median {result['first_packet_ms']['median']} ms "
          f"(p90 {result['first_packet_ms']['p90']}, target <= {TARGET_MS:.0f}); "
          f"speak -> sound median {result['speak_to_sound_ms']['median']} ms")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="measured runs (>= 5)")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5")
    sys.exit(asyncio.run(main(args.runs)))
