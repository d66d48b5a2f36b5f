#!/usr/bin/env bash
# What the tests need from Debian, installed when missing (idempotent: apt-get runs only then);
# `make test` runs it before the venv's dev install. The run path needs none of it.
# - chromium: tests/browser and bench/browser_latency.py drive /usr/lib/chromium/chromium through
#   the Python Playwright package (a dev extra). Never `playwright install` (it downloads a
#   browser and fails offline); the tests launch the Debian binary through executable_path.
# - espeak-ng: speaks the questions the full-duplex tests ask, in a voice other than the gateway's.
# - redis-server: the cluster registry tests/test_cluster*.py start on a free port (no
#   persistence; never as a service).
# - npm (Debian's, with its nodejs): `npm pack` fetches the third-party WHEP player
#   (tests/browser/test_whep_client.py) from the npm registry.
# - gcc, python3-dev: pesq (a dev extra, wideband PESQ for tests/unit/test_loss_sim.py and
#   bench/pesq_loss.py) ships no wheel and builds from source.
# Not root or no apt-get: says what is missing and leaves it; those tests skip, or fail under
# CI=true (tests/installed.py, tests/test_installed.py).
set -euo pipefail

missing=()
[ -x /usr/lib/chromium/chromium ] || missing+=(chromium)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v npm >/dev/null || missing+=(npm)
command -v gcc >/dev/null || missing+=(gcc)
py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$py/Python.h" ] || missing+=(python3-dev)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
    else
        echo "note: cannot install ${missing[*]} here (needs root and apt-get):" \
            "their tests will skip (and fail under CI=true)"
        exit 0
    fi
fi

/usr/lib/chromium/chromium --version
echo "npm $(npm --version), node $(node --version), $(gcc --version | head -1)"
