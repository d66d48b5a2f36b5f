#!/usr/bin/env bash
# What the tests need from Debian: Chromium for tests/browser and bench/browser_latency.py
# (/usr/lib/chromium/chromium, driven by the Python Playwright package) and espeak-ng, which
# speaks the questions the full-duplex tests ask in a voice other than the gateway's, and
# redis-server, the cluster registry tests/test_cluster*.py start on a free port (no
# persistence; never as a service). Idempotent: each step runs only
# when its result is missing. Never `playwright install` (it downloads a browser and fails
# offline); the tests launch the Debian binary through executable_path.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="${PIP:-.venv/bin/pip}"

missing=()
[ -x /usr/lib/chromium/chromium ] || missing+=(chromium)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
if ! "$(dirname "$PIP")/python" -c "import playwright" 2>/dev/null; then
    "$PIP" install playwright
fi

/usr/lib/chromium/chromium --version
"$(dirname "$PIP")/python" -c "from importlib.metadata import version; print('playwright', version('playwright'))"
