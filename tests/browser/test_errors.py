"""What the page tells the user when things go wrong."""

from __future__ import annotations

import re
import socket

import pytest

from tests.browser.conftest import open_demo

pytestmark = pytest.mark.browser


async def error_shown(page) -> dict:
    await page.wait_for_function("() => window.gatewayDemo.error !== null")
    assert await page.is_visible("#error")
    return await page.evaluate("window.gatewayDemo.error")


async def test_offer_refused_shows_the_servers_message(start_gateway, page):
    gw = await start_gateway(max_sessions=0)
    await open_demo(page, gw.url)
    async with page.expect_response(re.compile(r"/v1/sessions$")) as info:
        await page.click("#connect")
    response = await info.value
    assert response.status == 503
    body = await response.json()
    error = await error_shown(page)
    assert error["status"] == 503 and error["code"] == "session_limit"
    shown = await page.inner_text("#error")
    assert body["error"]["message"] in shown  # the gateway's own words
    assert "refused" in shown.lower() and "session_limit" in shown
    assert await page.evaluate("window.gatewayDemo.state") == "failed"
    assert await page.is_visible("#connect") and await page.is_disabled("#speak")
    assert len(gw.registry) == 0


async def test_server_and_network_errors(start_gateway, page):
    gw = await start_gateway()
    await open_demo(page, gw.url)

    async def broken(route):
        await route.fulfill(status=500, content_type="text/html", body="<h1>proxy exploded</h1>")

    await page.route(re.compile(r"/v1/sessions$"), broken)
    await page.click("#connect")
    error = await error_shown(page)
    assert error["status"] == 500, error
    assert "proxy exploded" in await page.inner_text("#error-message")

    await page.unroute(re.compile(r"/v1/sessions$"))
    await page.route(re.compile(r"/v1/sessions$"), lambda route: route.abort("connectionrefused"))
    await page.click("#connect")
    await page.wait_for_function("() => window.gatewayDemo.error?.code === 'unreachable'")
    assert "cannot reach the gateway" in await page.inner_text("#error-message")
    assert await page.evaluate("window.gatewayDemo.state") == "failed"

    # the page recovers once the gateway is reachable again
    await page.unroute(re.compile(r"/v1/sessions$"))
    await page.click("#connect")
    await page.wait_for_function("() => window.gatewayDemo.state === 'connected'")
    assert not await page.is_visible("#error")


async def test_ice_failure_is_reported(start_gateway, page):
    """The answer points at a UDP port that never answers, and the gateway never learns where
    Chromium is (candidates taken out of the offer, trickle blocked): no candidate pair can work.
    Chromium gives up after ≈15 s."""
    gw = await start_gateway()
    await open_demo(page, gw.url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
        hole.bind(("127.0.0.1", 0))  # swallows Chromium's checks, answers nothing
        port = hole.getsockname()[1]

        async def dead_end(route):
            offer = re.sub(r"^a=candidate:.*\r?\n", "", route.request.post_data, flags=re.M)
            response = await route.fetch(post_data=offer)
            sdp = re.sub(r"^(a=candidate:\S+ 1 udp \d+ 127\.0\.0\.1) \d+", rf"\g<1> {port}",
                         await response.text(), flags=re.M)
            await route.fulfill(response=response, body=sdp)

        async def no_trickle(route):
            if route.request.method == "PATCH":
                await route.abort()
            else:
                await route.continue_()

        await page.route(re.compile(r"/v1/sessions$"), dead_end)
        await page.route(re.compile(r"/v1/sessions/[^/]+$"), no_trickle)
        await page.click("#connect")
        await page.wait_for_function("() => window.gatewayDemo.error !== null", timeout=45_000)
    error = await page.evaluate("window.gatewayDemo.error")
    assert error["title"] == "ICE failed", error
    assert "--ice-hosts" in await page.inner_text("#error-message")
    assert await page.evaluate("window.gatewayDemo.state") == "failed"
