"""The page's "sound after N ms" readout times the utterance asked for, not whatever plays.

Speak on an idle stream: the figure is the onset in the page's audio graph (click -> the
AnalyserNode's level crosses -26 dBFS). Speak again while that one plays: the second utterance
waits behind the first in the gateway's queue, so its sound starts only when the first has played
out, and the figure must say so. The page learns the RTP timestamp of the second utterance's first
packet from the gateway (``first_timestamp`` in GET .../speech/{id}) and dates when Chromium's
receiver played it (``getSynchronizationSources``). A page that took "the level is up" for "this
utterance is audible" would report ~0 ms for the second one.
"""

from __future__ import annotations

import re

import pytest

from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer
from tests.browser.conftest import connect, open_demo, speak

pytestmark = [pytest.mark.browser, pytest.mark.serial]  # Chromium's onset within 300 ms

TONE_MS = 2000.0


async def heard(page) -> dict:
    """The latest Speak click's record, once the page has timed its sound."""
    await page.wait_for_function("() => window.gatewayDemo.lastSpeak?.ms != null")
    return await page.evaluate("window.gatewayDemo.lastSpeak")


async def readout_ms(page) -> float:
    text = await page.inner_text("#latency")
    match = re.fullmatch(r"sound after (\d+) ms", text.strip())
    assert match, text
    return float(match.group(1))


async def test_sound_after_times_this_utterance_not_the_one_playing(start_gateway, page):
    gw = await start_gateway(voices=VoiceRegistry([
        ToneSynthesizer(name="two", frequency=440.0, seconds=TONE_MS / 1000, sample_rate=24_000),
        ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000),
    ]))
    await open_demo(page, gw.url)
    await connect(page)

    # an idle stream: the first utterance is heard a plausible time after the click
    await speak(page, "Two seconds of tone.", voice="two")
    first = await heard(page)
    assert 0 < first["ms"] < 1000, first
    assert abs(await readout_ms(page) - first["ms"]) <= 1

    # at once a second one, while the first plays: it is heard once the first has played out
    await speak(page, "And two more.", voice="two")
    second = await heard(page)
    remaining = first["audibleAt"] + TONE_MS - second["clickedAt"]
    print(f"\nfirst: {first['ms']:.1f} ms ({first.get('method')}); second: {second['ms']:.1f} ms "
          f"({second.get('method')}), the first had {remaining:.1f} ms left")
    assert remaining > 1200, "the second click came late: the test measures nothing"
    assert second["ms"] > 1000, second
    # (Chromium's jitter buffer shrinks in the first seconds of sound: some 50-100 ms here)
    assert abs(second["ms"] - remaining) < 300, (second, remaining)
    assert abs(await readout_ms(page) - second["ms"]) <= 1

    # how each was measured: the audio graph on the idle stream, the RTP timestamp behind speech;
    # and where both were measured they agree (the graph hears it a little after it plays)
    assert first["method"] == "onset" and not first["busy"], first
    assert second["method"] == "rtp" and second["busy"], second
    assert second["firstTimestamp"] is not None and first["firstTimestamp"] is not None
    # the second utterance's first packet comes after the first's 2 s of packets (RTP ticks:
    # 48 per ms), and the receiver played it that much later, give or take its jitter buffer
    apart_ms = ((second["firstTimestamp"] - first["firstTimestamp"]) % 2**32) / 48
    assert TONE_MS <= apart_ms < TONE_MS + 500, apart_ms
    assert abs(second["playedAt"] - first["playedAt"] - apart_ms) < 250, (first, second)
    assert -50 < first["onsetAt"] - first["playedAt"] < 300, first

    # cutting in while one plays: busy, yet the new utterance is heard at once
    await page.check("#cut-in")
    await speak(page, "Cut in.", voice="tone")
    third = await heard(page)
    assert third["busy"] and third["method"] == "rtp", third
    assert 0 < third["ms"] < 1000, third
