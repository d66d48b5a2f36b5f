"""The demo page's live captions: the Speak card shows an utterance's words as the gateway's
``word`` events say they were heard, in order, the latest one highlighted."""

from __future__ import annotations

import pytest

from tests.browser.conftest import connect, open_demo, speak

pytestmark = pytest.mark.browser


async def test_captions_show_the_spoken_words_in_order_as_heard(start_gateway, page):
    gw = await start_gateway()
    await open_demo(page, gw.url)
    await connect(page)
    await page.wait_for_function("() => window.gatewayDemo.captions.state === 'open'")
    text = "captions follow every word"
    utterance = await speak(page, text, voice="tone")
    # part way: a prefix of the words, the newest highlighted as the current word
    await page.wait_for_function("() => window.gatewayDemo.captions.words.length >= 1")
    shown = (await page.inner_text("#captions")).split()
    assert shown == text.split()[:len(shown)]
    current = await page.eval_on_selector_all("#captions .word.current",
                                              "els => els.map(e => e.textContent)")
    assert len(current) <= 1 and (not current or current[0] in text.split())
    await page.wait_for_function(
        f"() => window.gatewayDemo.captions.words.length >= {len(text.split())}")
    captions = await page.evaluate("window.gatewayDemo.captions")
    assert captions["utterance"] == utterance["id"]
    assert [w["word"] for w in captions["words"]] == text.split()
    starts = [w["start_ms"] for w in captions["words"]]
    arrivals = [w["at"] for w in captions["words"]]
    assert starts == sorted(starts) and arrivals == sorted(arrivals)
    # spread over the utterance's second of audio as it plays, not all at once when sent
    assert arrivals[-1] - arrivals[0] >= 0.5 * (starts[-1] - starts[0])
    assert (await page.inner_text("#captions")).split() == text.split()
    await page.wait_for_function(
        "() => !document.querySelector('#captions .word.current')")  # done: none current
    # a second utterance starts a new line
    second = "and a new line"
    utterance = await speak(page, second, voice="tone")
    await page.wait_for_function(
        f"() => window.gatewayDemo.captions.utterance === '{utterance['id']}'"
        f" && window.gatewayDemo.captions.words.length >= {len(second.split())}")
    assert (await page.inner_text("#captions")).split() == second.split()
