"""--log-format json: one JSON object per line, naming the session (and utterance) it is about."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp

from bench.common import free_port
from gateway.client.peer import GatewayClient
from tests.test_access import _healthy


async def test_json_logs_carry_the_session_and_utterance():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
         "--ice-hosts", "127.0.0.1", "--voice", "tone:440?seconds=0.2", "--log-format", "json",
         "--voice", "cv=cosyvoice+http://127.0.0.1:9?spk_id=a"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await _healthy(port)
        async with aiohttp.ClientSession() as http:
            client = GatewayClient(f"http://127.0.0.1:{port}", http)
            await client.connect()
            said = await client.say("hello", voice="cv")  # nothing listens on :9: it fails
            state = await client.wait_utterance(said.utterance["id"], timeout=15)
            assert state["state"] == "failed"
            await client.close(delete=True)
        proc.terminate()
        out = await asyncio.to_thread(proc.communicate, timeout=20)
    finally:
        proc.kill()
    lines = [json.loads(line) for line in out[0].splitlines() if line.startswith("{")]
    assert lines and all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    failed = [line for line in lines if said.utterance["id"] == line.get("utterance")]
    assert failed and failed[0]["session"] == client.session_url.rsplit("/", 1)[1]
    assert any(line.get("session") and "closing" in line["message"] for line in lines)
