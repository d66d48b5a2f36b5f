#!/usr/bin/env bash
# What the browser tests (tests/browser) and bench/browser_latency.py need: Debian's Chromium
# (/usr/lib/chromium/chromium) and the Python Playwright package. Idempotent: each step runs only
# when its result is missing. Never `playwright install` (it downloads a browser and fails
# offline); the tests launch the Debian binary through executable_path.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-.venv/bin/pip}"

if [ ! -x /usr/lib/chromium/chromium ]; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
fi
if ! "$(dirname "$PIP")/python" -c "import playwright" 2>/dev/null; then
    "$PIP" install playwright
fi

/usr/lib/chromium/chromium --version
"$(dirname "$PIP")/python" -c "from importlib.metadata import version; print('playwright', version('playwright'))"
