"""The demo page's "Realtime" card in real Chromium: our own small WebRTC + events code speaking
the OpenAI Realtime protocol (an ephemeral key, ``POST /v1/realtime/calls``, the ``oai-events``
data channel). A typed turn gets a spoken answer on the RTP track, with its transcript and the
``output_audio_buffer`` events; Stop ends the call."""

from __future__ import annotations

import pytest

from tests.browser.conftest import WAIT_MS, new_page, open_demo
from tests.installed import need_module

pytestmark = pytest.mark.browser

CONNECTED = "() => window.gatewayDemo.realtime.state === 'connected'"


async def test_realtime_card_typed_turn_is_answered_aloud(start_gateway, browser):
    need_module("faster_whisper", "the [listen] extra (the duplex loop hears the microphone)")
    gw = await start_gateway(duplex=True, agent="echo", reply_voice="tone")
    page = await new_page(browser)
    await open_demo(page, gw.url)
    await page.click("#rt-start")
    await page.wait_for_function(CONNECTED, timeout=WAIT_MS)
    rt = await page.evaluate("window.gatewayDemo.realtime")
    assert rt["callId"], rt
    assert rt["events"].get("session.created") == 1, rt["events"]
    await page.fill("#rt-text", "Hello from the page")
    await page.press("#rt-text", "Enter")
    await page.wait_for_function(
        "() => (window.gatewayDemo.realtime.events['output_audio_buffer.stopped'] ?? 0) > 0",
        timeout=WAIT_MS)
    rt = await page.evaluate("window.gatewayDemo.realtime")
    assert rt["events"].get("output_audio_buffer.started", 0) >= 1, rt["events"]
    assert rt["events"].get("response.done", 0) >= 1, rt["events"]
    assert {"role": "assistant", "text": "You said: Hello from the page"} in rt["log"], rt["log"]
    inbound = await page.evaluate("window.gatewayDemo.realtime.inbound()")
    assert inbound["packetsReceived"] > 40 and inbound["totalSamplesReceived"] > 0, inbound
    assert await page.locator("#rt-log li[data-role=assistant]").count() == 1
    await page.click("#rt-stop")
    await page.wait_for_function("() => window.gatewayDemo.realtime.state === 'idle'")
    assert not page.js_errors, page.js_errors
