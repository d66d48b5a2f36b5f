"""With ``--workers``, the ElevenLabs-compatible WebSocket works through the public port: the
supervisor carries the upgrade to a worker (clients do not follow a redirect on a socket)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest

from bench.common import free_port
from tests.test_cluster import REPO, clean_env

LOOPBACK = "127.0.0.1"


@pytest.fixture
def supervisor(tmp_path):
    port = free_port()
    log = open(tmp_path / "node.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", LOOPBACK, "--port", str(port),
         "--workers", "2", "--ice-hosts", LOOPBACK, "--voice", "tone:440?seconds=1",
         "--log-level", "WARNING", "--auth-token", "s3cret"],
        cwd=REPO, env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "node.log").read_text()
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/healthz", timeout=2) as r:
                h = json.loads(r.read())
            if h.get("workers") and all(w["state"] == "serving" for w in h["workers"]):
                break
        except OSError:
            pass
        time.sleep(0.1)
    yield f"{LOOPBACK}:{port}"
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


async def test_the_socket_works_through_the_public_port(supervisor):
    url = (f"ws://{supervisor}/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM/multi-stream-input"
           "?output_format=pcm_24000")
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(url)  # no token: the worker's refusal comes back as is
        assert err.value.status == 401
        async with http.ws_connect(url, headers={"xi-api-key": "s3cret"}) as ws:
            await ws.send_json({"text": "Proxied.", "context_id": "a",  # one clause
                                "flush": True})
            await ws.send_json({"context_id": "a", "close_context": True})
            audio, final = b"", None
            async with asyncio.timeout(20):
                async for msg in ws:
                    data = json.loads(msg.data)
                    if data.get("audio"):
                        audio += base64.b64decode(data["audio"])
                    if data.get("isFinal"):
                        final = data
                        break
    assert final == {"isFinal": True, "contextId": "a"}
    assert len(audio) == 2 * 24_000  # the 1 s tone, every byte through the proxy
