"""Issue 23, every error is the documented JSON, with no traceback and no token echoed: the
requests that answered 500, text/plain or an empty octet-stream before."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from bench.cluster import free_range
from tests.test_api import CHROMIUM


async def raw(gateway_url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    url = urlsplit(gateway_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(request)
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


def error_code(status: int, headers: dict[str, str], body: bytes) -> str:
    assert headers["content-type"].startswith("application/json"), headers
    return json.loads(body)["error"]["code"]


@pytest.fixture
def no_tracebacks(caplog):
    caplog.set_level(logging.DEBUG)
    yield
    shown = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert not any(r.exc_info for r in shown), [r.getMessage() for r in shown if r.exc_info]


async def test_wait_with_a_nan_timeout_is_a_400(gateway, no_tracebacks):
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM,
                                 headers={"Content-Type": "application/sdp"}) as r:
        location = gateway.url + r.headers["Location"]
    async with gateway.http.post(f"{location}/speech", json={"text": "hi"}) as r:
        utterance = (await r.json())["id"]
    for timeout in ("nan", "-1", "x"):
        async with gateway.http.get(f"{location}/speech/{utterance}",
                                    params={"wait": "1", "timeout": timeout}) as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == "invalid_timeout"


@pytest.mark.parametrize(("encoding", "body"), [
    ("gzip", b"\x1f\x8b not gzip at all"), ("br", b"abcde"), ("zstd", b"abcde")])
async def test_a_body_in_a_bad_or_unknown_encoding_is_a_400(gateway, no_tracebacks, encoding,
                                                            body):
    request = (b"POST /v1/speech/stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
               b"\r\nContent-Encoding: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
               % (encoding.encode(), len(body)) + body)
    status, headers, answer = await raw(gateway.url, request)
    assert status == 400
    assert error_code(status, headers, answer) in ("invalid_body", "bad_request")


async def test_a_missing_page_file_is_a_json_404(gateway):
    async with gateway.http.get(f"{gateway.url}/web/missing") as r:
        assert r.status == 404
        assert (await r.json())["error"]["code"] == "not_found"
    async with gateway.http.get(f"{gateway.url}/web/index.html") as r:
        assert r.status == 200  # the files that are there still are


async def test_a_request_line_too_long_is_json_and_does_not_echo_the_token(gateway,
                                                                         no_tracebacks):
    path = b"/v1/audio/speech?access_token=s3cret-token&input=" + b"a" * 9000
    status, headers, body = await raw(
        gateway.url, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert status == 400 and error_code(status, headers, body) == "bad_request"
    assert b"s3cret" not in body and b"aaaa" not in body


@pytest.mark.timeout(90)
async def test_a_gzip_body_through_the_supervisors_proxy_is_accepted():
    base = free_range(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "VOICE_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(base),
         "--workers", "2", "--ice-hosts", "127.0.0.1", "--voice", "tone:440?seconds=0.2"],
        env=env, cwd=Path(__file__).parent.parent,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    body = gzip.compress(json.dumps({"input": "hi", "response_format": "pcm"}).encode())
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with http.get(f"http://127.0.0.1:{base}/healthz") as r:
                        workers = (await r.json())["workers"]
                    if all(w["state"] == "serving" and w["max_sessions"] for w in workers):
                        break
                except (aiohttp.ClientError, ValueError, KeyError):
                    pass
                assert time.monotonic() < deadline, "the node did not start"
                await asyncio.sleep(0.5)
            async with http.post(f"http://127.0.0.1:{base}/v1/audio/speech", data=body,
                                 headers=headers) as r:
                assert r.status == 200, await r.text()  # 500 before: Content-Encoding forwarded
                assert len(await r.read()) > 1000
    finally:
        proc.terminate()
        proc.wait(30)
