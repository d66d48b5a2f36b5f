"""Barge-in as the listener hears it: Interrupt silences the page within 100 ms of the click,
not counting the audio Chromium's own jitter buffer already holds.

Measured in the page: click -> the AnalyserNode's 5 ms level stays below -40 dBFS (held 40 ms, so
a render dropout is not mistaken for the stop). That time is the DELETE round trip + at most one
20 ms pacing slot at the gateway + Chromium's receive pipeline (jitter buffer, decoding, audio
rendering). Chromium's adaptive jitter buffer alone holds 30-60 ms here on a quiet machine (its
target rises with NACK on) and 200-370 ms when the 2 cores are overloaded, so the whole is
70-140 ms, or more under load. The part the gateway and the page answer for is what is left after
the jitter-buffer delay Chromium reports (inbound-rtp jitterBufferDelay per emitted sample over
the last second): 25-80 ms, load or not. A gateway that failed to flush its ≈1 s frame queue
would add hundreds of ms to it.
"""

from __future__ import annotations

import statistics

import pytest

from tests.browser.conftest import connect, open_demo, speak, wait_stats

pytestmark = [pytest.mark.browser, pytest.mark.serial]  # silence within 100 ms in Chromium

TRIALS = 5
LIMIT_MS = 100.0  # click -> silence, beyond what Chromium's jitter buffer holds (median)
TRIAL_LIMIT_MS = 200.0  # the same, any single trial


async def test_interrupt_silences_within_100_ms(start_gateway, page):
    gw = await start_gateway()
    await open_demo(page, gw.url)
    await connect(page)
    results = []
    for _ in range(TRIALS):
        utterance = await speak(page, "Keep going for a while.", voice="long")  # 30 s, 330 Hz
        await page.wait_for_function("() => window.gatewayDemo.lastSpeak.audibleAt !== null")
        # audible and steady for a stats period, so the jitter-buffer figure is current
        await page.wait_for_function(
            "(t) => window.gatewayDemo.level() > 0.1 && window.gatewayDemo.stats?.at > t + 1000",
            arg=await page.evaluate("window.gatewayDemo.lastSpeak.audibleAt"),
        )
        await page.click("#interrupt")
        await page.wait_for_function("() => window.gatewayDemo.lastInterrupt?.done")
        result = await page.evaluate("window.gatewayDemo.lastInterrupt")
        assert result["wasAudible"], result
        assert result["interrupted"] >= 1, result
        assert result["ms"] is not None, f"the level never fell after Interrupt: {result}"
        assert result["jitterBufferMs"] is not None, result
        results.append(result)
        # the gateway agrees: the utterance ended as interrupted, not done
        async with gw.http.get(gw.url + utterance["location"]) as r:
            assert (await r.json())["state"] == "interrupted"
        # and Chromium's own level follows (its audioLevel is smoothed, so it falls later)
        await wait_stats(page, "s.audioLevel < 0.01")

    heard = [r["ms"] for r in results]
    beyond = [r["ms"] - r["jitterBufferMs"] for r in results]
    print(f"\nclick Interrupt -> silent (ms): {[round(v, 1) for v in heard]}"
          f"\n  Chromium jitter buffer (ms):  {[round(r['jitterBufferMs'], 1) for r in results]}"
          f"\n  beyond the jitter buffer:     {[round(v, 1) for v in beyond]}")
    assert statistics.median(beyond) < LIMIT_MS, beyond
    assert max(beyond) < TRIAL_LIMIT_MS, beyond
