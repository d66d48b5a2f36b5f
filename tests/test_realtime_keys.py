"""Ephemeral keys: ``client.realtime.client_secrets.create()`` with our bearer token makes an
``ek_…`` key bound to its session config, which a browser then uses as its bearer for
``calls`` (and the Realtime WebSocket) and for nothing else."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from gateway.realtime.keys import EphemeralKeys
from tests.installed import need_module

openai = need_module("openai", "the dev tools (the official SDK)")
need_module("faster_whisper", "the [listen] extra")
TOKEN = "s3cret"


def test_keys_expire_and_are_bounded():
    now = [1000.0]
    keys = EphemeralKeys(clock=lambda: now[0], max_keys=3)
    value, expires_at = keys.issue({"instructions": "x"}, 10)
    assert value.startswith("ek_") and expires_at == 1010
    assert keys.get(value).session == {"instructions": "x"}
    now[0] = 1010.0
    assert keys.get(value) is None  # expired
    for _ in range(5):
        keys.issue(None)
    assert len(keys) == 3
    with pytest.raises(ValueError):
        keys.issue(None, 5)


@pytest.mark.asr
async def test_an_ephemeral_key_opens_a_call_with_its_session(start_gateway):
    gateway = await start_gateway(duplex=True, auth_tokens=(TOKEN,))
    url = f"{gateway.url}/v1"
    backend = openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0)
    secret = await backend.realtime.client_secrets.create(
        expires_after={"anchor": "created_at", "seconds": 120},
        session={"type": "realtime", "instructions": "From the key.",
                 "output_modalities": ["text"]})
    assert secret.value.startswith("ek_")
    assert secret.session.instructions == "From the key."
    browser = openai.AsyncOpenAI(base_url=url, api_key=secret.value, max_retries=0)

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="sendrecv")
    channel = pc.createDataChannel("oai-events")
    events: list[dict] = []
    got = asyncio.Event()

    @channel.on("message")
    def on_message(message: str) -> None:
        events.append(json.loads(message))
        got.set()

    try:
        await pc.setLocalDescription(await pc.createOffer())
        answer = await browser.realtime.calls.create(sdp=pc.localDescription.sdp)
        await pc.setRemoteDescription(RTCSessionDescription(answer.text, "answer"))
        await asyncio.wait_for(got.wait(), 15)
        created = events[0]
        assert created["type"] == "session.created"
        assert created["session"]["instructions"] == "From the key."
        assert created["session"]["output_modalities"] == ["text"]
        # the WebSocket takes it too
        conn = await browser.realtime.connect(model="m", max_retries=0).enter()
        first = await conn.recv()
        assert first.type == "session.created" and first.session.instructions == "From the key."
        await conn.close()
    finally:
        await pc.close()
    headers = {"Authorization": f"Bearer {secret.value}", "Content-Type": "application/json"}
    # ... and nothing else: not our other routes, not another key
    async with gateway.http.post(f"{url}/sessions", data="{}", headers=headers) as r:
        assert r.status == 401
    async with gateway.http.post(f"{url}/realtime/client_secrets", data="{}",
                                 headers=headers) as r:
        assert r.status == 401
    unknown = {"Authorization": "Bearer ek_unknown", "Content-Type": "application/sdp"}
    async with gateway.http.post(f"{url}/realtime/calls", data="v=0", headers=unknown) as r:
        assert r.status == 401
    with pytest.raises(openai.BadRequestError):
        await backend.realtime.client_secrets.create(
            expires_after={"anchor": "created_at", "seconds": 99_999})
    with pytest.raises(openai.BadRequestError):
        await backend.realtime.client_secrets.create(session={
            "type": "realtime", "audio": {"input": {"turn_detection": {"type": "nope"}}}})


@pytest.mark.asr
async def test_the_beta_sessions_route_issues_a_client_secret(start_gateway):
    gateway = await start_gateway(duplex=True)
    async with gateway.http.post(f"{gateway.url}/v1/realtime/sessions", json={
            "model": "gpt-4o-realtime-preview", "voice": "verse", "modalities": ["text"]}) as r:
        assert r.status == 200, await r.text()
        body = await r.json()
    assert body["client_secret"]["value"].startswith("ek_")
    assert body["voice"] == "verse" and body["modalities"] == ["text"]
