"""WHEP's HTTP rules for third-party players (OPTIONS, CORS), bearer tokens, rate limits,
idle sessions and graceful drain."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import aiohttp
import jwt
import pytest

from bench.common import free_port
from gateway.client.peer import GatewayClient
from tests.test_api import CHROMIUM

SDP_HEADERS = {"Content-Type": "application/sdp"}


async def test_options_and_cors_preflight(gateway):
    headers = {"Origin": "https://player.example", "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "authorization, content-type"}
    async with gateway.http.options(f"{gateway.url}/v1/sessions", headers=headers) as r:
        assert r.status == 204
        assert r.headers["Accept-Post"] == "application/sdp"
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        allowed = r.headers["Access-Control-Allow-Headers"]
        assert all(h in allowed for h in ("Authorization", "Content-Type", "If-Match"))
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM,
                                 headers={**SDP_HEADERS, "Origin": "https://player.example"}) as r:
        assert r.status == 201
        exposed = r.headers["Access-Control-Expose-Headers"]
        assert all(h in exposed for h in ("Location", "ETag", "Link"))
        location = r.headers["Location"]
    async with gateway.http.delete(gateway.url + location) as r:
        assert r.status == 204


async def test_cors_origins_can_be_restricted(start_gateway):
    gateway = await start_gateway(cors_origins=("https://ok.example",))
    for origin, allowed in (("https://ok.example", True), ("https://evil.example", False)):
        async with gateway.http.get(f"{gateway.url}/healthz", headers={"Origin": origin}) as r:
            assert (r.headers.get("Access-Control-Allow-Origin") == origin) is allowed


async def test_bearer_tokens_static_and_jwt(start_gateway):
    secret = "a-test-secret-of-at-least-32-bytes!!"
    gateway = await start_gateway(auth_tokens=("static-token",), auth_jwt_secret=secret)
    url = f"{gateway.url}/v1/sessions"
    async with gateway.http.post(url, data=CHROMIUM, headers=SDP_HEADERS) as r:
        assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await r.json())["error"]["code"] == "unauthorized"
    wrong = {**SDP_HEADERS, "Authorization": "Bearer nope"}
    async with gateway.http.post(url, data=CHROMIUM, headers=wrong) as r:
        assert r.status == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    expired = jwt.encode({"exp": int(time.time()) - 10}, secret, algorithm="HS256")
    stale = {**SDP_HEADERS, "Authorization": f"Bearer {expired}"}
    async with gateway.http.post(url, data=CHROMIUM, headers=stale) as r:
        assert r.status == 401 and (await r.json())["error"]["code"] == "token_expired"
    good_jwt = jwt.encode({"exp": int(time.time()) + 60}, secret, algorithm="HS256")
    for token in ("static-token", good_jwt):
        auth = {"Authorization": f"Bearer {token}"}
        async with gateway.http.post(url, data=CHROMIUM, headers={**SDP_HEADERS, **auth}) as r:
            assert r.status == 201
            location = gateway.url + r.headers["Location"]
        async with gateway.http.post(f"{location}/speech", json={"text": "x"}) as r:
            assert r.status == 401  # every route that touches a session
        async with gateway.http.delete(location, headers=auth) as r:
            assert r.status == 204
    body = {"input": "hi", "voice": "tone"}
    async with gateway.http.post(f"{gateway.url}/v1/audio/speech", json=body) as r:
        assert r.status == 401  # the HTTP speech routes too
    # RFC 6750 2.3: a GET may carry the token as ?access_token= (<audio src>, EventSource)
    query = "input=hi&voice=tone&response_format=pcm"
    async with gateway.http.get(f"{gateway.url}/v1/audio/speech?{query}") as r:
        assert r.status == 401
    async with gateway.http.get(f"{gateway.url}/v1/audio/speech?{query}&access_token=nope") as r:
        assert r.status == 401 and (await r.json())["error"]["code"] == "invalid_token"
    for token in ("static-token", good_jwt):
        async with gateway.http.get(
            f"{gateway.url}/v1/audio/speech?{query}&access_token={token}"
        ) as r:
            assert r.status == 200 and len(await r.read()) > 0
    async with gateway.http.post(  # but never for a request that changes state
        f"{gateway.url}/v1/sessions?access_token=static-token", data=CHROMIUM, headers=SDP_HEADERS
    ) as r:
        assert r.status == 401
    for open_path in ("/healthz", "/metrics", "/v1/voices"):
        async with gateway.http.get(gateway.url + open_path) as r:
            assert r.status == 200, open_path


async def test_rate_limit_and_session_cap_say_when_to_retry(start_gateway):
    gateway = await start_gateway(rate_limit_sessions=1.0, max_sessions=1)
    url = f"{gateway.url}/v1/sessions"
    statuses = []
    for _ in range(3):
        async with gateway.http.post(url, data=CHROMIUM, headers=SDP_HEADERS) as r:
            statuses.append(r.status)
            if r.status in (429, 503):
                assert int(r.headers["Retry-After"]) >= 1
                assert (await r.json())["error"]["code"] in ("rate_limited", "session_limit")
    assert statuses == [201, 503, 429]  # the cap, then the rate (a burst of 2 per address)


async def test_idle_sessions_are_closed(start_gateway):
    gateway = await start_gateway(idle_timeout_s=0.4)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session = next(iter(gateway.registry))
    said = await client.say("tone", voice="tone")  # 1 s of speech: busy, not idle
    await client.wait_utterance(said.utterance["id"])
    assert not session.closed.is_set()
    await asyncio.wait_for(session.closed.wait(), 5)
    assert session.close_reason == "idle"
    await client.close(delete=False)


async def test_drain_refuses_new_sessions_and_lets_speech_finish(gateway):
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session = next(iter(gateway.registry))
    said = await client.say("tone", voice="tone")
    drained = asyncio.create_task(gateway.registry.drain(10.0))
    await asyncio.sleep(0)
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM,
                                 headers=SDP_HEADERS) as r:
        assert r.status == 503 and r.headers["Retry-After"]
        assert (await r.json())["error"]["code"] == "draining"
    async with gateway.http.get(f"{gateway.url}/healthz") as r:
        assert (await r.json())["status"] == "draining"
    await asyncio.wait_for(drained, 10)
    utterance = session.speaker.get(said.utterance["id"])
    assert utterance.state.value == "done" and session.close_reason == "draining"
    await client.close(delete=False)


def _start(port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", "--host", "127.0.0.1", "--port", str(port),
         "--ice-hosts", "127.0.0.1", "--voice", "tone:440?seconds=20", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


async def _healthy(port: int) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)  # polling a starting process: no event to wait on
    raise AssertionError("the gateway did not start")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_drains_and_exits_zero_a_second_exits_at_once(signum):
    port = free_port()
    proc = _start(port)
    try:
        await _healthy(port)
        proc.send_signal(signum)
        assert await asyncio.to_thread(proc.wait, 15) == 0
        assert "draining" in proc.stdout.read()
    finally:
        proc.kill()
    port = free_port()
    proc = _start(port, "--drain-timeout", "30")
    try:
        await _healthy(port)
        async with aiohttp.ClientSession() as http:
            client = GatewayClient(f"http://127.0.0.1:{port}", http)
            await client.connect()
            await client.say("long")  # 20 s of tone: the drain would wait for it
            proc.send_signal(signum)
            await asyncio.sleep(0.3)  # the first signal's drain has begun (a process: no event)
            started = time.monotonic()
            proc.send_signal(signum)
            code = await asyncio.to_thread(proc.wait, 10)
            assert code == 128 + signum and time.monotonic() - started < 5
            await client.close(delete=False)
    finally:
        proc.kill()


async def test_shutdown_closes_an_idle_text_socket_with_1001_and_exits_promptly():
    """An ElevenLabs stream-input socket is no session: the drain does not end it, and LiveKit
    keeps one open for up to 300 s. At the shutdown it is closed as going away (1001), and the
    gateway exits once its drain is over, not when aiohttp's shutdown gives up (60 s)."""
    port = free_port()
    proc = _start(port, "--drain-timeout", "1")
    try:
        await _healthy(port)
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"http://127.0.0.1:{port}/v1/text-to-speech/tone/"
                                       "stream-input?inactivity_timeout=300")
            await ws.send_json({"text": " "})
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            message = await asyncio.wait_for(ws.receive(), 20)
            assert message.type == aiohttp.WSMsgType.CLOSE and ws.close_code == 1001
            assert await asyncio.to_thread(proc.wait, 20) == 0
            assert time.monotonic() - started < 15
    finally:
        proc.kill()


async def test_a_request_in_flight_gets_the_drain_allowance_at_shutdown():
    """A request whose body is still coming when the gateway stops (here: half a speech
    request's body, then nothing) is cancelled once the drain's allowance (``--drain-timeout``)
    has passed, not after aiohttp's 60 s or the body's idle timeout (30 s)."""
    port = free_port()
    proc = _start(port, "--drain-timeout", "1")
    try:
        await _healthy(port)
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"input\"")
        await writer.drain()
        await asyncio.sleep(0.3)  # the handler is waiting for the body (a process: no event)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 25) == 0
        assert time.monotonic() - started < 10
        writer.close()
    finally:
        proc.kill()


async def test_configured_ice_servers_are_links_on_the_201(start_gateway):
    gateway = await start_gateway(ice_servers=("turn:127.0.0.1:3478",), turn_username="u",
                                  turn_credential="p")
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM,
                                 headers=SDP_HEADERS) as r:
        assert r.status == 201
        assert r.headers["Link"] == ('<turn:127.0.0.1:3478>; rel="ice-server"; username="u"; '
                                     'credential="p"; credential-type="password"')
        location = r.headers["Location"]
    async with gateway.http.delete(gateway.url + location) as r:
        assert r.status == 204
