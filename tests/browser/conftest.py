"""Browser fixtures: headless Debian Chromium (Playwright, async API) against an in-process gateway.

The gateway runs in the test's event loop (``start_gateway`` from tests/conftest.py, tone voices,
host candidates on 127.0.0.1); Playwright's async API shares that loop. Every test gets a fresh
browser: launching costs well under a second, and nothing leaks between tests.

Skipped, with the reason, only when the Chromium binary is absent (.ci/install-debian.sh installs
it); Chromium present without the playwright package is an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser.chromium import CHROMIUM, launch
from tests.installed import missing

if TYPE_CHECKING:
    from playwright.async_api import Page

# Conditions are awaited with generous limits (2 shared cores, other work running); assertions
# carry the real bounds.
WAIT_MS = 20_000

READY = "() => window.gatewayDemo?.ready && window.gatewayDemo.voices !== null"
CONNECTED = (
    "() => window.gatewayDemo.state === 'connected' && "
    "window.gatewayDemo.timing.firstPacketAt !== null"
)


@pytest.fixture
async def playwright_driver() -> AsyncIterator[Any]:
    if not CHROMIUM.exists():
        missing("chromium", f"Debian's Chromium at {CHROMIUM} (.ci/install-debian.sh)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:  # chromium is there, so this is a broken setup, not an opt-out
        pytest.fail("Chromium is installed but the playwright package is not: "
                    "run .ci/install-debian.sh", pytrace=False)
    async with async_playwright() as p:
        yield p


@pytest.fixture
async def browser(playwright_driver: Any) -> AsyncIterator[Any]:
    b = await launch(playwright_driver)
    try:
        yield b
    finally:
        await b.close()


@pytest.fixture
async def launch_browser(playwright_driver: Any) -> AsyncIterator[Any]:
    """``await launch_browser(*extra_args)``: another Chromium with more flags (closed after the
    test), e.g. ``--use-file-for-fake-audio-capture=question.wav`` for a known microphone."""
    browsers: list[Any] = []

    async def make(*extra_args: str) -> Any:
        b = await launch(playwright_driver, *extra_args)
        browsers.append(b)
        return b

    try:
        yield make
    finally:
        for b in browsers:
            await b.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors  # type: ignore[attr-defined]
    try:
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


async def open_demo(page: Page, base_url: str) -> None:
    await page.goto(base_url + "/")
    await page.wait_for_function(READY)


async def connect(page: Page) -> None:
    await page.click("#connect")
    await page.wait_for_function(CONNECTED)


async def speak(page: Page, text: str, voice: str | None = None) -> dict[str, Any]:
    """Click Speak; returns the gateway's 202 body once the page has it."""
    if voice is not None:
        await page.select_option("#voice", voice)
    await page.fill("#text", text)
    await page.click("#speak")
    await page.wait_for_function(
        "() => window.gatewayDemo.lastSpeak?.utterance || window.gatewayDemo.error"
    )
    error = await page.evaluate("window.gatewayDemo.error")
    assert error is None, error
    return await page.evaluate("window.gatewayDemo.lastSpeak.utterance")


async def stats(page: Page) -> dict[str, Any]:
    """A fresh getStats() snapshot (not the once-a-second one)."""
    return await page.evaluate("window.gatewayDemo.statsNow()")


async def wait_stats(page: Page, condition: str, timeout_ms: int = WAIT_MS) -> dict[str, Any]:
    """Fresh getStats() snapshots, every 100 ms, until the JS expression ``condition`` over ``s``
    holds; returns that snapshot. (wait_for_function does not await async predicates.)"""
    return await page.evaluate(
        """async ([condition, timeout]) => {
            const test = new Function("s", `return (${condition});`);
            const started = performance.now();
            for (;;) {
                const s = await window.gatewayDemo.statsNow();
                if (s && test(s)) return s;
                if (performance.now() - started > timeout) {
                    throw new Error(`stats never met ${condition}: ${JSON.stringify(s)}`);
                }
                await new Promise((resolve) => setTimeout(resolve, 100));
            }
        }""",
        [condition, timeout_ms],
    )


async def wait_packets(page: Page, count: int, timeout_ms: int = WAIT_MS) -> dict[str, Any]:
    """Until inbound-rtp packetsReceived reaches ``count``; returns that snapshot."""
    return await wait_stats(page, f"s.packetsReceived >= {int(count)}", timeout_ms)


async def new_page(browser: Any, width: int = 1280, height: int = 900) -> Page:
    """A second page in its own context (closed with the browser). Its uncaught errors are
    collected in ``page.js_errors`` (the ``page`` fixture asserts on its own; check these)."""
    context = await browser.new_context(viewport={"width": width, "height": height})
    page = await context.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.js_errors = errors  # type: ignore[attr-defined]
    return page
