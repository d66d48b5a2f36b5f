"""The page in action, on a laptop and on a phone. The screenshots go to tests/artifacts/
(git-ignored); with ``UPDATE_SCREENSHOT=1`` (``make screenshot``) the laptop one replaces the
README's docs/screenshot.png -- a test run leaves the working tree as it found it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser.conftest import connect, open_demo, speak

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "screenshot.png"
ARTIFACTS = ROOT / "tests" / "artifacts"  # git-ignored


async def history(page, n: int) -> None:
    await page.wait_for_function("(n) => window.gatewayDemo.history.length >= n", arg=n)


async def test_screenshot_and_responsive_layout(start_gateway, page):
    gw = await start_gateway()
    await open_demo(page, gw.url)
    await connect(page)

    # a few seconds of activity so the plots have something to show: speech, a barge-in, speech
    await speak(page, "A long tone first.", voice="long")
    await history(page, 8)
    await page.click("#interrupt")
    await page.wait_for_function("() => window.gatewayDemo.lastInterrupt?.done")
    await history(page, 11)
    # the same words over HTTP first (the card's figures), then over WebRTC
    await page.select_option("#voice", "tone")
    await page.fill("#text", "Then a short one at 440 hertz.")
    await page.click("#http-play")
    await page.wait_for_function("() => window.gatewayDemo.http.state === 'done'")
    await speak(page, "Then a short one at 440 hertz.", voice="tone")
    await page.wait_for_function(
        "() => window.gatewayDemo.level() > 0.1 && "
        "window.gatewayDemo.history.at(-1).audioLevel > 0.1 && "
        "window.gatewayDemo.lastSpeak.ms != null"
    )
    for selector in ("#s-rtt", "#s-jitter", "#s-received", "#s-nack", "#s-concealed", "#s-jb",
                     "#s-level", "#s-first", "#s-codec", "#s-fmtp", "#s-answer-fmtp"):
        assert (await page.inner_text(selector)).strip() not in ("", "\N{EN DASH}"), selector
    for selector in ("#h-first", "#h-jb", "#h-ring", "#h-underruns", "#h-decoded",
                     "#cmp-http", "#cmp-webrtc"):
        assert (await page.inner_text(selector)).strip() not in ("", "\N{EN DASH}"), selector
    # the plots were drawn by the page: canvases hold non-blank pixels
    for canvas in ("#plot-jb", "#plot-loss", "#plot-level"):
        drawn = await page.eval_on_selector(
            canvas,
            "c => c.getContext('2d').getImageData(0, 0, c.width, c.height).data"
            ".some((v, i) => i % 4 === 3 && v > 0)",
        )
        assert drawn, canvas
    ARTIFACTS.mkdir(exist_ok=True)
    laptop = ARTIFACTS / "screenshot.png"
    await page.screenshot(path=str(laptop), full_page=True)
    assert laptop.stat().st_size > 20_000
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(laptop, SCREENSHOT)

    # phone: one column, nothing wider than the screen, controls reachable and finger-sized
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.wait_for_function("() => document.documentElement.scrollWidth <= 390")
    buttons = ("#disconnect", "#speak", "#interrupt", "#http-play", "#http-stop", "#ogg-play",
               "#talk-start", "#talk-stop")
    for selector in (*buttons, "#text", "#voice", "#http-pace", "#http-start", "#ogg-audio"):
        box = await page.locator(selector).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, selector
        if selector in buttons:
            assert box["height"] >= 36, (selector, box)
    speak_box = await page.locator(".speak").bounding_box()
    stats_box = await page.locator(".stats").bounding_box()
    assert stats_box["y"] >= speak_box["y"] + speak_box["height"], "single column on a phone"
    await page.screenshot(path=str(ARTIFACTS / "screenshot-phone.png"), full_page=True)
