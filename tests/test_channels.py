"""Broadcast channels end to end: real aiortc WHEP listeners and HTTP listeners on one
channel, against the live gateway on loopback (gateway/channels, docs/channels.md)."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest

from gateway.api import channel_routes
from tests.channel_clients import EventReader, HttpListener, WhepListener


async def _create(gw, name: str, voice: str = "tone", **extra) -> dict:
    async with gw.http.post(f"{gw.url}/v1/channels",
                            json={"name": name, "voice": voice, **extra}) as response:
        assert response.status == 201, await response.text()
        assert response.headers["Location"].endswith(f"/v1/channels/{name}")
        return await response.json()


async def _say(gw, name: str, text: str = "hello there") -> str:
    async with gw.http.post(f"{gw.url}/v1/channels/{name}/speech", json={"text": text}) as r:
        assert r.status == 202, await r.text()
        return (await r.json())["id"]


async def _state(gw, name: str) -> dict:
    async with gw.http.get(f"{gw.url}/v1/channels/{name}") as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def _until(predicate, timeout: float = 10.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(step)


async def _metrics(gw) -> dict[str, float]:
    async with gw.http.get(f"{gw.url}/metrics") as response:
        text = await response.text()
    return {m[1]: float(m[2]) for m in re.finditer(
        r"^(voice_gateway_channel_\w+?) ([0-9.e+]+)$", text, re.M) for _ in [0]
        } | {m.group(1): float(m.group(2)) for m in re.finditer(
            r"^(voice_gateway_channel_\w+) ([0-9.e+]+)$", text, re.M)}


async def _delete(gw, name: str) -> None:
    async with gw.http.delete(f"{gw.url}/v1/channels/{name}") as response:
        assert response.status == 204


async def test_whep_and_http_listeners_hear_the_same_frames_encoded_once(gateway):
    gw = gateway
    await _create(gw, "radio")
    events = EventReader(gw.url, "radio", gw.http)
    await events.started.wait()
    whep = [WhepListener(gw.url, "radio", gw.http) for _ in range(2)]
    await asyncio.gather(*(w.connect() for w in whep))
    http = [HttpListener(gw.url, "radio", gw.http, fmt) for fmt in ("frames", "opus")]
    for h in http:
        h.start()
    await asyncio.gather(*(h.started.wait() for h in http))
    before = await _metrics(gw)
    await asyncio.sleep(0.2)
    utterance = await _say(gw, "radio")

    async def done() -> bool:
        state = await _state(gw, "radio")
        return state["utterances"]["done"] == 1

    await _until(done)
    await asyncio.sleep(0.3)  # the last frames reach every listener
    reference = whep[0].heard.speech()
    assert len(reference) >= 45  # the 1 s tone
    assert whep[1].heard.speech() == reference
    for h in http:
        assert h.heard.speech() == reference, h.format
    state = await _state(gw, "radio")
    assert state["listeners"] == {"whep": 2, "http": 2}
    assert state["encoder"]["frames_encoded"] == len(reference)
    assert state["air"]["frames_sent"] == len(reference)
    after = await _metrics(gw)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    assert delta["voice_gateway_channel_encoder_runs_total"] == 1
    assert delta["voice_gateway_channel_frames_encoded_total"] == len(reference)
    assert delta["voice_gateway_channel_frames_delivered_total"] >= 4 * len(reference)
    assert after["voice_gateway_channel_listeners"] >= 4
    states = [e["state"] for e in events.of("utterance") if e["id"] == utterance]
    assert states[-1] == "done" and "playing" in states
    assert events.of("caption") == [{"utterance": utterance, "text": "hello there"}]
    assert len(events.of("listener_joined")) == 4
    await _delete(gw, "radio")
    for h in http:
        await h.wait(5)
    for w in whep:
        await w.close()


@pytest.mark.serial  # frame counts after real-time sleeps
async def test_a_late_joiner_starts_mid_stream(gateway):
    gw = gateway
    await _create(gw, "late", voice="long")
    early_whep = WhepListener(gw.url, "late", gw.http)
    await early_whep.connect()
    early_http = HttpListener(gw.url, "late", gw.http)
    early_http.start()
    await early_http.started.wait()
    await _say(gw, "late")
    await asyncio.sleep(1.5)
    late_whep = WhepListener(gw.url, "late", gw.http)
    await late_whep.connect()
    late_http = HttpListener(gw.url, "late", gw.http)
    late_http.start()
    await late_http.started.wait()
    await asyncio.sleep(1.5)
    await _delete(gw, "late")
    await asyncio.gather(early_http.wait(5), late_http.wait(5))
    for early, late in ((early_whep, late_whep), (early_http, late_http)):
        reference, joined = early.heard.speech(), late.heard.speech()
        assert len(joined) >= 30  # it hears the channel from when it joined ...
        assert len(joined) <= len(reference) - 50  # ... not from the utterance's start
        assert reference[0] not in joined  # the utterance's first frame went before
        start = len(reference) - len(joined)
        # the same frames, to the end: the early listener's tail (a WHEP peer may hear the
        # last frame or two the other did not, as the channel closed between their slots)
        tail = [reference[i:i + len(joined)] for i in range(start - 3, start + 4)]
        assert joined[:-3] in [t[:len(joined) - 3] for t in tail]
    await early_whep.close()
    await late_whep.close()


@pytest.mark.serial  # the others' frame rate after real-time sleeps
async def test_a_stalled_reader_is_dropped_and_the_others_keep_hearing(gateway, monkeypatch):
    monkeypatch.setattr(channel_routes, "SEND_BUFFER_BYTES", 4096)  # fill the socket sooner
    gw = gateway
    await _create(gw, "slow", voice="long")
    events = EventReader(gw.url, "slow", gw.http)
    await events.started.wait()
    good_whep = WhepListener(gw.url, "slow", gw.http)
    await good_whep.connect()
    good_http = HttpListener(gw.url, "slow", gw.http)
    good_http.start()
    await good_http.started.wait()
    host, port = gw.url.removeprefix("http://").split(":")
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=raw, limit=4096)
    writer.write(b"GET /v1/channels/slow/listen?format=pcm HTTP/1.1\r\nHost: gw\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    started = time.monotonic()
    await _say(gw, "slow")  # ... and the stalled reader reads no more

    async def dropped() -> bool:
        return any(e["reason"].startswith("too_slow") for e in events.of("listener_left"))

    await _until(dropped, timeout=20)
    dropped_at = time.monotonic()
    await asyncio.sleep(1.0)
    state = await _state(gw, "slow")
    assert state["listeners"] == {"whep": 1, "http": 1}
    assert state["listeners_left"] == {"too_slow": 1}
    await _delete(gw, "slow")
    await good_http.wait(5)
    for listener in (good_whep, good_http):
        assert listener.heard.max_gap_s(started + 0.5, dropped_at + 1.0) < 1.0
        assert len(listener.heard.speech()) >= 50 * (dropped_at - started)
    writer.close()
    await good_whep.close()


async def test_deleting_a_channel_ends_its_listeners(gateway):
    gw = gateway
    await _create(gw, "gone", voice="long")
    events = EventReader(gw.url, "gone", gw.http)
    await events.started.wait()
    whep = WhepListener(gw.url, "gone", gw.http)
    await whep.connect()
    http = HttpListener(gw.url, "gone", gw.http)
    http.start()
    await http.started.wait()
    await _say(gw, "gone")
    await asyncio.sleep(0.5)
    await _delete(gw, "gone")
    await http.wait(5)
    assert http.error is not None and http.error.code == "listener_closed"
    await asyncio.wait_for(events.task, 5)  # the SSE stream ends ...
    assert events.events[-1][0] == "channel_closed", events.events[-6:]  # ... last
    left = events.of("listener_left")
    assert {e["transport"] for e in left} == {"whep", "http"}
    await asyncio.wait_for(whep.ended.wait(), 5)  # DTLS close_notify: the peer is closed
    async with gw.http.get(f"{gw.url}/v1/channels/gone") as response:
        assert response.status == 404
        assert (await response.json())["error"]["code"] == "unknown_channel"
    await whep.close()


async def test_a_whep_listener_has_its_own_resource(gateway):
    gw = gateway
    await _create(gw, "res")
    whep = WhepListener(gw.url, "res", gw.http)
    await whep.connect()
    assert whep.location is not None and "/v1/channels/res/listeners/" in whep.location
    async with gw.http.get(gw.url + whep.location) as response:
        assert response.status == 200
        state = await response.json()
        assert state["transport"] == "whep" and state["connection_state"] == "connected"
    async with gw.http.patch(gw.url + whep.location, data="a=end-of-candidates\r\n", headers={
            "Content-Type": "application/trickle-ice-sdpfrag"}) as response:
        assert response.status == 204
    async with gw.http.delete(gw.url + whep.location) as response:
        assert response.status == 204
    await asyncio.wait_for(whep.ended.wait(), 5)
    async with gw.http.delete(gw.url + whep.location) as response:
        assert response.status == 204  # idempotent
    assert (await _state(gw, "res"))["listeners"] == {"whep": 0, "http": 0}
    await whep.close()


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("post", "/v1/channels", {"name": "bad name!"}, 400, "invalid_channel_name"),
    ("post", "/v1/channels", {"name": "x", "voice": "nope"}, 400, "unknown_voice"),
    ("post", "/v1/channels", {"name": "x", "max_listeners": 10**6}, 400,
     "invalid_max_listeners"),
    ("get", "/v1/channels/nope", None, 404, "unknown_channel"),
    ("delete", "/v1/channels/nope", None, 404, "unknown_channel"),
    ("post", "/v1/channels/nope/speech", {"text": "hi"}, 404, "unknown_channel"),
    ("get", "/v1/channels/nope/listen", None, 404, "unknown_channel"),
    ("get", "/v1/channels/nope/events", None, 404, "unknown_channel"),
])
async def test_bad_requests_get_json_errors(gateway, method, path, body, status, code):
    async with getattr(gateway.http, method)(gateway.url + path, json=body) as response:
        assert response.status == status
        assert (await response.json())["error"]["code"] == code


async def test_channel_limits_and_formats(gateway):
    gw = gateway
    await _create(gw, "one", max_listeners=1)
    async with gw.http.post(f"{gw.url}/v1/channels", json={"name": "one"}) as response:
        assert response.status == 409
        assert (await response.json())["error"]["code"] == "channel_exists"
    async with gw.http.get(f"{gw.url}/v1/channels/one/listen?format=mp3") as response:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "unsupported_format"
    first = HttpListener(gw.url, "one", gw.http)
    first.start()
    await first.started.wait()
    async with gw.http.get(f"{gw.url}/v1/channels/one/listen") as response:
        assert response.status == 503
        assert (await response.json())["error"]["code"] == "channel_full"
    async with gw.http.post(f"{gw.url}/v1/channels/one/whep", data="v=0",
                            headers={"Content-Type": "text/plain"}) as response:
        assert response.status == 415
    async with gw.http.get(f"{gw.url}/v1/channels") as response:
        listed = (await response.json())["channels"]
        assert [(c["name"], c["listener_count"]) for c in listed] == [("one", 1)]
    await _delete(gw, "one")
    await first.wait(5)


async def test_pcm_and_wav_listeners_get_the_air_decoded_once(gateway):
    gw = gateway
    await _create(gw, "pcm")
    chunks: dict[str, bytearray] = {"pcm": bytearray(), "wav": bytearray()}

    async def read(fmt: str) -> None:
        async with gw.http.get(f"{gw.url}/v1/channels/pcm/listen?format={fmt}") as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == f"audio/{fmt}"
            async for chunk in response.content.iter_any():
                chunks[fmt] += chunk

    tasks = [asyncio.ensure_future(read(fmt)) for fmt in chunks]
    await asyncio.sleep(0.3)
    await _say(gw, "pcm")
    await asyncio.sleep(1.5)
    state = await _state(gw, "pcm")
    await _delete(gw, "pcm")
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert chunks["wav"][:4] == b"RIFF"
    # live: ≈1.8 s of 24 kHz s16le each (the keep-alive silence too), not a burst
    assert 1.2 * 48_000 < len(chunks["pcm"]) < 2.6 * 48_000
    assert state["air"]["decoded"] <= state["air"]["ticks"]  # once per frame, not per listener


async def test_deleting_a_channel_leaves_no_task_behind(gateway):
    gw = gateway
    await asyncio.sleep(0.2)
    before = {t for t in asyncio.all_tasks() if not t.done()}
    await _create(gw, "tasks", voice="long")
    whep = WhepListener(gw.url, "tasks", gw.http)
    await whep.connect()
    http = HttpListener(gw.url, "tasks", gw.http, "pcm")
    http.start()
    await http.started.wait()
    events = EventReader(gw.url, "tasks", gw.http)
    await events.started.wait()
    await _say(gw, "tasks")
    await asyncio.sleep(0.5)
    await _delete(gw, "tasks")
    await http.wait(5)
    await asyncio.wait_for(events.task, 5)
    await asyncio.wait_for(whep.ended.wait(), 5)
    await whep.close()

    def extra() -> list[str]:
        # aiohttp's RequestHandler.start: the server side of the client's kept-alive
        # connections (the pool of gw.http), not the channel's
        return sorted(t.get_name() + ":" + repr(t.get_coro())[:60]
                      for t in asyncio.all_tasks() - before
                      if not t.done() and t is not asyncio.current_task()
                      and "RequestHandler.start" not in repr(t.get_coro()))

    for _ in range(40):
        if not extra():
            break
        await asyncio.sleep(0.1)
    assert extra() == []
