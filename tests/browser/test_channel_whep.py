"""A channel heard in real Chromium: two pages, each medooze's ``WHEPClient`` (the npm
package, on another origin: tests/browser/test_whep_client.py's player), ``view()`` the same
channel's WHEP endpoint; both hear the channel's voice, an aiortc listener beside them gets the
very Opus packets; each page's ``stop()`` DELETEs its own listener resource."""

from __future__ import annotations

import asyncio

import pytest

from tests.browser.test_whep_client import player_origin, wait_stats, whip_whep  # noqa: F401
from tests.channel_clients import WhepListener

pytestmark = pytest.mark.browser


async def test_two_pages_and_an_aiortc_peer_hear_one_channel(start_gateway, browser,
                                                            player_origin):  # noqa: F811
    gw = await start_gateway()
    async with gw.http.post(f"{gw.url}/v1/channels",
                            json={"name": "hall", "voice": "long"}) as r:
        assert r.status == 201
    contexts = [await browser.new_context() for _ in range(2)]
    pages = [await c.new_page() for c in contexts]
    try:
        for page in pages:
            await page.goto(player_origin + "/")
            await page.wait_for_function("() => window.player !== undefined")
        viewed = [await page.evaluate("(url) => window.player.view(url)",
                                      gw.url + "/v1/channels/hall/whep") for page in pages]
        resources = [v["resource"] for v in viewed]
        assert len(set(resources)) == 2
        assert all("/v1/channels/hall/listeners/" in r for r in resources)
        for page in pages:
            await page.wait_for_function(
                "() => window.player.pc.connectionState === 'connected'")
        peer = WhepListener(gw.url, "hall", gw.http)
        await peer.connect()
        async with gw.http.post(f"{gw.url}/v1/channels/hall/speech",
                                json={"text": "Good evening."}) as r:
            assert r.status == 202
        for page in pages:  # each page hears the 330 Hz tone
            await page.wait_for_function("() => window.player.level() > 0.05")
            await wait_stats(page, "s.packetsReceived > 100")
        async with gw.http.get(f"{gw.url}/v1/channels/hall") as r:
            state = await r.json()
        assert state["listeners"] == {"whep": 3, "http": 0}
        assert state["encoder"]["utterances_encoded"] == 1  # once, for all three
        assert len(peer.heard.speech()) > 50
        for page in pages:
            await page.evaluate("window.player.stop()")
        for _ in range(100):
            async with gw.http.get(f"{gw.url}/v1/channels/hall") as r:
                if (await r.json())["listeners"]["whep"] == 1:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the pages' listeners did not leave")
        for page in pages:
            assert await page.evaluate("window.player.errors") == []
        await peer.close()
    finally:
        for c in contexts:
            await c.close()
