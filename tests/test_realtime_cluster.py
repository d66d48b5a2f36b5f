"""The Realtime API through a supervisor's public port (``python -m gateway --workers 2
--duplex``): the WebSocket upgrade proxied to a worker (a browser does not follow a redirect
on a WebSocket), a call placed like a session, an ephemeral key good on the worker that
issued it, a call's control socket routed to the call's worker by its id."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator

import aiohttp
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from tests.installed import need_module
from tests.test_cluster import LOOPBACK, Node, serving

openai = need_module("openai", "the dev tools (the official SDK)")
need_module("websockets", "the dev tools (the openai SDK's realtime transport)")
need_module("faster_whisper", "the [listen] extra")
pytestmark = [pytest.mark.asr, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = Node("realtime", tmp_path_factory.mktemp("realtime-cluster"), None,
                ("--duplex", "--asr", "whisper:tiny.en?workers=1"))
    try:
        node.wait(serving(), timeout=150)
        yield node
    finally:
        node.stop()


def worker_of(node: Node, session_id: str) -> str:
    prefixes = [w["id"] + "-" for w in node.health()["workers"]]
    return next(p for p in prefixes if session_id.startswith(p))


async def test_the_websocket_through_the_public_port(node):
    sdk = openai.AsyncOpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    conns = [await sdk.realtime.connect(model="m", max_retries=0).enter() for _ in range(2)]
    try:
        created = [await c.recv() for c in conns]
        assert all(e.type == "session.created" for e in created)
        ids = [e.session.id for e in created]
        assert len({worker_of(node, i) for i in ids}) == 2  # one on each worker
        conn = conns[0]
        await conn.conversation.item.create(item={
            "type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "through"}]})
        await conn.response.create()
        audio = 0
        while True:
            event = await asyncio.wait_for(conn.recv(), 15)
            if event.type == "response.output_audio.delta":
                audio += len(base64.b64decode(event.delta))
            if event.type == "response.done":
                break
        assert event.response.status == "completed" and audio == 2 * 48_000
    finally:
        for c in conns:
            await c.close()


async def test_an_ephemeral_key_call_and_its_control_socket_through_the_port(node):
    backend = openai.AsyncOpenAI(base_url=f"{node.url}/v1", api_key="unused", max_retries=0)
    secret = await backend.realtime.client_secrets.create(
        session={"type": "realtime", "instructions": "Pinned.", "output_modalities": ["text"]})
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("audio", direction="sendrecv")
    channel = pc.createDataChannel("oai-events")
    events: list[dict] = []
    got = asyncio.Event()
    channel.on("message", lambda m: (events.append(json.loads(m)), got.set()))
    try:
        await pc.setLocalDescription(await pc.createOffer())
        browser = openai.AsyncOpenAI(base_url=f"{node.url}/v1", api_key=secret.value,
                                     max_retries=0)
        raw = await browser.realtime.calls.with_raw_response.create(
            sdp=pc.localDescription.sdp)
        assert raw.http_response.status_code == 201
        call_id = raw.headers["Location"].rsplit("/", 1)[1]
        assert secret.value.startswith("ek_" + worker_of(node, call_id))  # its key's worker
        answer = raw.http_response.text
        assert f"c=IN IP4 {LOOPBACK}" in answer or LOOPBACK in answer
        await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await asyncio.wait_for(got.wait(), 15)
        assert events[0]["session"]["instructions"] == "Pinned."
        control = await backend.realtime.connect(call_id=call_id, max_retries=0).enter()
        try:
            assert (await control.recv()).session.id == call_id
            await control.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text",
                                                                "text": "steer"}]})
            await control.response.create()
            while (await asyncio.wait_for(control.recv(), 15)).type != "response.done":
                pass
        finally:
            await control.close()
        for _ in range(100):  # the browser's channel gets the same turn (a moment later)
            if any(e["type"] == "response.done" for e in events):
                break
            await asyncio.sleep(0.05)
        assert any(e["type"] == "response.done" for e in events)
        async with aiohttp.ClientSession() as http, \
                http.post(f"{node.url}/v1/realtime/calls/{call_id}/hangup") as r:
            assert r.status == 200
        def sessions() -> int:
            return sum(w["sessions"] or 0 for w in node.health()["workers"])

        for _ in range(50):  # the supervisor reads its workers' loads every POLL_S (0.5 s):
            if sessions() == 0:  # a count read at once may be from before the hangup
                break
            await asyncio.sleep(0.1)
        assert sessions() == 0  # the call hung up, its control socket closed: none left
    finally:
        await pc.close()
