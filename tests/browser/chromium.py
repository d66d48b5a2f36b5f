"""Where Debian's Chromium lives and how the browser tests and bench launch it.

Flags and their reasons: /work/shared/notes/browser-testing.md. Installed by
.ci/install-debian.sh (apt chromium; playwright is a dev extra; never ``playwright install``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("CHROMIUM_PATH", "/usr/lib/chromium/chromium"))

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # without these Chromium floods the closed network with refused connections
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # fake media UI also stops Chromium hiding host candidates behind mDNS .local names
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    # Chromium ignores lo unless told; the test gateway offers only 127.0.0.1
    "--allow-loopback-in-peer-connection",
]
# Deliberately not --autoplay-policy=no-user-gesture-required: the page must start audio from
# the user's click, and Playwright's click() is a real user gesture.


async def launch(playwright: Any, *extra_args: str, **kwargs: Any) -> Any:
    """Chromium with ARGS and ``extra_args`` (e.g. ``--use-file-for-fake-audio-capture=F.wav``,
    the fake microphone's signal: a 16-bit PCM WAV, looped)."""
    return await playwright.chromium.launch(
        executable_path=str(CHROMIUM), args=[*ARGS, *extra_args], headless=True, **kwargs
    )
