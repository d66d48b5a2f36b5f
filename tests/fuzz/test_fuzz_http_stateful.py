"""Schemathesis' fuzzing and stateful phases against the live server: sequences of calls that
follow the links Schemathesis infers from the API document (a session's creation, then its
state, trickle, speech, utterances, events and DELETE, with real session ids: most generated
offers are replaced by a real Chromium offer, tests/schemathesis_stateful_hooks.py). No 5xx,
every response as documented, and no traceback of ours in the server's log. (Sessions never
connect -- no peer answers -- so a short connect timeout reaps them.)

Its length is a time budget: 20 s under the CI profile, 600 s under ``make fuzz``
(``FUZZ_HTTP_SECONDS`` overrides). The server runs with the abuse limits low (a small clause
and audio budget, a few candidates) so the limits' own error paths are exercised too."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.common import free_port
from tests.fuzz.profiles import FUZZ_MARKS, FUZZING
from tests.test_access import _healthy
from tests.test_openapi import CHECKS, ENDLESS_STREAMS

pytestmark = [*FUZZ_MARKS, pytest.mark.timeout(0 if FUZZING else 180)]
ROOT = Path(__file__).resolve().parent.parent.parent
SECONDS = os.environ.get("FUZZ_HTTP_SECONDS") or ("600" if FUZZING else "20")


@pytest.mark.skipif(shutil.which("schemathesis", path=str(Path(sys.executable).parent)) is None,
                    reason="schemathesis is a dev dependency")
async def test_stateful_schemathesis_finds_nothing_against_the_live_server():
    port = free_port()
    log = tempfile.TemporaryFile("w+")  # a file: a full pipe would block the server's logging
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
         "--ice-hosts", "127.0.0.1", "--voice", "tone:440?seconds=0.1", "--log-level",
         "INFO", "--max-text-chars", "500", "--max-speech-seconds", "5",
         "--max-remote-candidates", "8", "--max-sessions", "200", "--connect-timeout", "2"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await _healthy(port)
        st = Path(sys.executable).with_name("schemathesis")
        run = await asyncio.to_thread(
            subprocess.run,
            [str(st), "run", f"http://127.0.0.1:{port}/openapi.json", "--checks", CHECKS,
             "--phases", "fuzzing,stateful", "--max-time", SECONDS, "--no-color",
             "--exclude-path-regex", ENDLESS_STREAMS,
             *([] if FUZZING else ["--seed", "1"])],
            cwd=ROOT, capture_output=True, text=True, timeout=float(SECONDS) * 3 + 120,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_stateful_hooks",
                 "PYTHONPATH": str(ROOT)},
        )
        assert run.returncode == 0, run.stdout[-6000:]
    finally:
        proc.kill()
        proc.wait(10)
        log.seek(0)
        server_log = log.read()
        log.close()
    assert "Traceback" not in server_log, server_log[-4000:]
