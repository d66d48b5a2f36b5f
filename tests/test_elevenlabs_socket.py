"""The ElevenLabs-compatible WebSockets and HTTP routes, spoken to on the wire (aiohttp).

The real clients (Pipecat, LiveKit Agents) run in tests/test_elevenlabs_clients.py; here the
protocol's edges: contexts interleaved, flush, close_context with and without flush, the socket
closing mid-context (synthesis stops: the CosyVoice stand-in sees its request go away), bad
input answered with an error message on a socket that goes on, and the bounds."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from typing import Any

import aiohttp
import av
import numpy as np
import pytest

from gateway.elevenlabs.routes import ELEVENLABS
from gateway.elevenlabs.socket import SocketLimits
from gateway.testing.cosyvoice_server import CosyVoiceStandIn, StandInConfig
from gateway.tts.registry import VoiceRegistry, build_cosyvoice

GUARD_S = 10.0
PATH = "/v1/text-to-speech/{voice}/{kind}"


def ws_url(gateway, voice: str = "tone", kind: str = "multi-stream-input", **query: str) -> str:
    q = "&".join(f"{k}={v}" for k, v in {"output_format": "pcm_24000", **query}.items())
    return gateway.url.replace("http", "ws") + PATH.format(voice=voice, kind=kind) + "?" + q


async def messages_until(ws, done) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(GUARD_S):
        while not done(out):
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                out.append({"_closed": msg.type.name, "_code": ws.close_code})
                break
            out.append(json.loads(msg.data))
    return out


def finals(msgs) -> list[str | None]:
    return [m.get("contextId") for m in msgs if m.get("isFinal") is True]


def audio_of(msgs, context: str | None = None) -> np.ndarray:
    data = b"".join(base64.b64decode(m["audio"]) for m in msgs
                    if m.get("audio") and (context is None or m.get("contextId") == context))
    return np.frombuffer(data, dtype="<i2")


def aligned_text(msgs, context: str) -> str:
    return "".join(c for m in msgs if m.get("contextId") == context and m.get("alignment")
                   for c in m["alignment"]["chars"])


async def test_two_contexts_interleave_on_one_socket_each_with_its_final(gateway):
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        for ctx in ("a", "b"):
            await ws.send_json({"text": " ", "context_id": ctx, "voice_settings": {"speed": 1}})
        for word in "one two three, four five six. seven".split():
            for ctx in ("a", "b"):
                await ws.send_json({"text": f"{word} ", "context_id": ctx})
        await ws.send_json({"text": ""})  # a keep-alive changes nothing
        for ctx in ("a", "b"):
            await ws.send_json({"context_id": ctx, "flush": True})
            await ws.send_json({"context_id": ctx, "close_context": True})
        msgs = await messages_until(ws, lambda m: len(finals(m)) == 2)
    assert sorted(finals(msgs)) == ["a", "b"]
    order = [m["contextId"] for m in msgs if m.get("audio")]
    assert order.index("b") < len(order) - 1 - order[::-1].index("a"), "interleaved"
    for ctx in ("a", "b"):
        # the tone voice speaks 1 s per clause: "one two" / "three, four five six." / "seven"
        assert audio_of(msgs, ctx).size == 3 * 24_000
        assert aligned_text(msgs, ctx).split() == "one two three, four five six. seven".split()
        alignment = next(m["alignment"] for m in msgs if m.get("contextId") == ctx
                         and m.get("alignment"))
        assert len(alignment["chars"]) == len(alignment["charStartTimesMs"]) == len(
            alignment["charDurationsMs"])
        assert alignment["charStartTimesMs"][-1] + alignment["charDurationsMs"][-1] == 1000


async def test_clauses_are_spoken_before_the_input_ends(gateway):
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        await ws.send_json({"text": "Hello there, ", "context_id": "a"})
        msgs = await messages_until(ws, lambda m: any(x.get("audio") for x in m))
        assert aligned_text(msgs, "a") == "Hello there, "
        await ws.send_json({"text": "and the rest", "context_id": "a", "flush": True})
        msgs = await messages_until(ws, lambda m: any(x.get("audio") for x in m))
        assert aligned_text(msgs, "a") == "and the rest "
        await ws.send_json({"context_id": "a", "close_context": True})
        assert finals(await messages_until(ws, finals)) == ["a"]
        # the socket goes on: a new context after the old one ended
        await ws.send_json({"text": "Again.", "context_id": "c", "flush": True})
        await ws.send_json({"context_id": "c", "close_context": True})
        assert finals(await messages_until(ws, finals)) == ["c"]


async def test_stream_input_is_one_context_ended_by_empty_text(gateway):
    async with gateway.http.ws_connect(ws_url(gateway, kind="stream-input")) as ws:
        await ws.send_json({"text": " ", "voice_settings": {}, "xi_api_key": "ignored"})
        await ws.send_json({"text": "Hello world. "})
        await ws.send_json({"text": "Bye"})
        await ws.send_json({"text": ""})
        msgs = await messages_until(ws, lambda m: "_closed" in m[-1] if m else False)
    assert finals(msgs) == [None]
    assert all("contextId" not in m for m in msgs if "_closed" not in m)
    assert audio_of(msgs).size == 2 * 24_000
    assert msgs[-1]["_closed"] in ("CLOSE", "CLOSED", "CLOSING")


@pytest.mark.parametrize("fmt,check", [
    ("pcm_16000", lambda b: len(b) == 2 * 16_000),
    ("ulaw_8000", lambda b: len(b) == 8000),
    ("mp3_22050_32", lambda b: b[:2] in (b"\xff\xf3", b"\xff\xf2", b"\xff\xfb")),
    ("opus_48000_64", lambda b: b[:4] == b"OggS"),
])
async def test_output_formats(gateway, fmt, check):
    async with gateway.http.ws_connect(ws_url(gateway, output_format=fmt)) as ws:
        await ws.send_json({"text": "One clause.", "context_id": "a", "flush": True})
        await ws.send_json({"context_id": "a", "close_context": True})
        msgs = await messages_until(ws, finals)
    data = b"".join(base64.b64decode(m["audio"]) for m in msgs if m.get("audio"))
    assert check(data)
    if fmt.startswith(("mp3", "opus")):
        with av.open(io.BytesIO(data)) as container:
            pcm = np.concatenate([f.to_ndarray().ravel() for f in container.decode(audio=0)])
        rate = int(fmt.split("_")[1])
        assert 0.9 < pcm.size / rate < 1.2  # the 1 s tone, through the codec


async def test_bad_input_gets_an_error_and_the_socket_goes_on(gateway):
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        for bad, code in [("not json", "invalid_message"), ("[1, 2]", "invalid_message"),
                          (json.dumps({"text": 5, "context_id": "a"}), "invalid_text"),
                          (json.dumps({"text": "x", "context_id": ""}), "invalid_context_id"),
                          (json.dumps({"context_id": "zz", "close_context": True}),
                           "unknown_context")]:
            await ws.send_str(bad)
            (reply,) = await messages_until(ws, lambda m: bool(m))
            assert reply["error"] == code and reply["message"]
        await ws.send_bytes(b"\x00")
        assert (await messages_until(ws, bool))[0]["error"] == "invalid_message"
        for i in range(8):
            await ws.send_json({"text": " ", "context_id": f"c{i}"})
        await ws.send_json({"text": " ", "context_id": "one-too-many"})
        (reply,) = await messages_until(ws, bool)
        assert reply == {"error": "max_active_conversations", "message": reply["message"],
                         "contextId": "one-too-many"}
        await ws.send_json({"text": "Still here.", "context_id": "c0", "flush": True})
        await ws.send_json({"context_id": "c0", "close_context": True})
        msgs = await messages_until(ws, finals)
        assert finals(msgs) == ["c0"] and audio_of(msgs).size == 24_000


async def test_text_per_context_is_bounded(start_gateway):
    gateway = await start_gateway(max_text_chars=50)
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        await ws.send_json({"text": "x" * 40, "context_id": "a"})
        await ws.send_json({"text": "y" * 40, "context_id": "a"})
        (reply,) = await messages_until(ws, bool)
        assert reply["error"] == "text_too_long" and reply["contextId"] == "a"


async def test_an_oversized_message_closes_the_socket(gateway):
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        await ws.send_json({"text": "x" * 70_000, "context_id": "a"})
        msgs = await messages_until(ws, lambda m: bool(m) and "_closed" in m[-1])
    assert msgs[-1]["_code"] == aiohttp.WSCloseCode.MESSAGE_TOO_BIG


async def test_the_inactivity_timeout_closes_an_idle_socket(gateway):
    loop = asyncio.get_running_loop()
    async with gateway.http.ws_connect(ws_url(gateway, inactivity_timeout="1")) as ws:
        started = loop.time()
        msgs = await messages_until(ws, lambda m: bool(m) and "_closed" in m[-1])
    assert msgs[0]["error"] == "input_timeout_exceeded"
    assert msgs[-1]["_code"] == aiohttp.WSCloseCode.POLICY_VIOLATION
    assert 0.9 < loop.time() - started < 5


@pytest.mark.parametrize("query,status", [({"output_format": "wav_99"}, 400),
                                          ({"inactivity_timeout": "soon"}, 400)])
async def test_bad_query_is_refused_before_the_upgrade(gateway, query, status):
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await gateway.http.ws_connect(ws_url(gateway, **query))
    assert err.value.status == status


async def test_voice_ids_map_like_the_openai_names(gateway):
    for voice in ("tone", "21m00Tcm4TlvDq8ikWAM", "hpp4J3VqNfWAUOO0d1Us"):
        async with gateway.http.ws_connect(ws_url(gateway, voice=voice)) as ws:
            await ws.send_json({"text": "Hi.", "context_id": "a", "flush": True})
            await ws.send_json({"context_id": "a", "close_context": True})
            assert finals(await messages_until(ws, finals)) == ["a"]
    resp = await gateway.http.post(gateway.url + "/v1/text-to-speech/nobody/stream",
                                   json={"text": "Hi."})
    assert resp.status == 404
    assert (await resp.json())["error"]["code"] == "voice_not_found"
    listed = await (await gateway.http.get(gateway.url + "/v1/elevenlabs/voices")).json()
    assert [v["voice_id"] for v in listed["voices"]] == ["tone", "tone48k", "long"]


async def test_xi_api_key_is_taken_as_the_bearer_token(start_gateway):
    gateway = await start_gateway(auth_tokens=("s3cret",))
    with pytest.raises(aiohttp.WSServerHandshakeError) as err:
        await gateway.http.ws_connect(ws_url(gateway), headers={"xi-api-key": "wrong"})
    assert err.value.status == 401
    async with gateway.http.ws_connect(ws_url(gateway), headers={"xi-api-key": "s3cret"}):
        pass
    resp = await gateway.http.post(gateway.url + "/v1/text-to-speech/tone/stream",
                                   json={"text": "Hi."}, headers={"xi-api-key": "s3cret"})
    assert resp.status == 200


async def test_http_stream_and_timestamps(gateway):
    url = gateway.url + "/v1/text-to-speech/tone"
    resp = await gateway.http.post(url + "/stream?output_format=pcm_24000",
                                   json={"text": "First clause. Second one.", "model_id": "m"})
    assert resp.status == 200 and resp.content_type == "audio/pcm"
    assert len(await resp.read()) == 2 * 2 * 24_000
    resp = await gateway.http.post(url + "/stream/with-timestamps?output_format=pcm_24000",
                                   json={"text": "First clause. Second one."})
    lines = [json.loads(line) for line in (await resp.read()).splitlines() if line]
    chars = "".join(c for x in lines if x["alignment"] for c in x["alignment"]["characters"])
    assert chars.split() == "First clause. Second one.".split()
    ends = [t for x in lines if x["alignment"]
            for t in x["alignment"]["character_end_times_seconds"]]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(2.0, abs=0.01)
    whole = await gateway.http.post(url + "?output_format=mp3_44100_128", json={"text": "Hi."})
    assert whole.content_type == "audio/mpeg" and len(await whole.read()) > 10_000
    timed = await (await gateway.http.post(url + "/with-timestamps", json={"text": "Hi."})).json()
    assert timed["alignment"]["characters"] == ["H", "i", ".", " "]
    for body, code in [(b"{", "invalid_json"), (b'{"text": ""}', "invalid_text"),
                       (b'{"text": 3}', "invalid_text")]:
        bad = await gateway.http.post(url + "/stream", data=body)
        assert bad.status == 400 and (await bad.json())["error"]["code"] == code


# -- synthesis stops: the CosyVoice stand-in sees its request go away ------------------------


@pytest.fixture
async def standin():
    server = CosyVoiceStandIn(StandInConfig(sample_rate=24_000, chunk_bytes=4800))
    await server.start()
    yield server
    server.gate = None
    await server.stop()


@pytest.fixture
async def cv_gateway(start_gateway, standin):
    q = "spk_id=%E4%B8%AD%E6%96%87%E5%A5%B3&rate=24000&timeout=5"
    voices = VoiceRegistry([build_cosyvoice(f"cosyvoice+{standin.http_url}?{q}", "cv")])
    gateway = await start_gateway(voices=voices, phrase_cache_mb=0)
    yield gateway
    await voices.close()


async def _held_request(ws, standin):
    standin.gate = asyncio.Event()  # every stream holds after its first chunk
    await ws.send_json({"text": " ", "context_id": "a"})
    await ws.send_json({"text": "This clause is long enough to be held, ", "context_id": "a"})
    (request,) = await asyncio.wait_for(standin.wait_requests(1), GUARD_S)
    return request


async def test_close_context_without_flush_stops_synthesis(cv_gateway, standin):
    async with cv_gateway.http.ws_connect(ws_url(cv_gateway, voice="cv")) as ws:
        request = await _held_request(ws, standin)
        await ws.send_json({"context_id": "a", "close_context": True})
        msgs = await messages_until(ws, finals)
        assert finals(msgs) == ["a"] and audio_of(msgs).size == 0
        await asyncio.wait_for(request.closed.wait(), GUARD_S)
        assert request.outcome == "cancelled"


async def test_closing_the_socket_mid_context_stops_synthesis(cv_gateway, standin):
    stats = cv_gateway.app[ELEVENLABS].stats
    ws = await cv_gateway.http.ws_connect(ws_url(cv_gateway, voice="cv"))
    request = await _held_request(ws, standin)
    assert len(stats.contexts) == 1
    await ws.close()
    await asyncio.wait_for(request.closed.wait(), GUARD_S)
    assert request.outcome == "cancelled"
    for _ in range(int(GUARD_S * 100)):  # the handler's own clean-up, polled
        if not (stats.contexts or stats.sockets):
            break
        await asyncio.sleep(0.01)
    assert not stats.contexts and not stats.sockets


async def test_flushed_text_is_still_spoken_after_close_context(cv_gateway, standin):
    async with cv_gateway.http.ws_connect(ws_url(cv_gateway, voice="cv")) as ws:
        await ws.send_json({"text": "Flushed words here", "context_id": "a", "flush": True})
        await ws.send_json({"context_id": "a", "close_context": True})
        msgs = await messages_until(ws, finals)
    assert aligned_text(msgs, "a") == "Flushed words here "
    timed = [m["alignment"] for m in msgs if m.get("alignment")]
    assert audio_of(msgs).size > 0.5 * 24_000 and timed  # estimated: CosyVoice gives none



async def test_close_socket_finishes_every_context_then_closes(gateway):
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        await ws.send_json({"text": "First context", "context_id": "a"})
        await ws.send_json({"text": "Second context", "context_id": "b"})
        await ws.send_json({"close_socket": True})
        msgs = await messages_until(ws, lambda m: bool(m) and "_closed" in m[-1])
    assert sorted(finals(msgs)) == ["a", "b"]
    assert audio_of(msgs, "a").size == audio_of(msgs, "b").size == 24_000
    assert msgs[-1]["_closed"] in ("CLOSE", "CLOSED", "CLOSING")
    stats = gateway.app[ELEVENLABS].stats
    for _ in range(500):  # the handler's own clean-up, polled
        if not stats.sockets:
            break
        await asyncio.sleep(0.01)
    assert not stats.sockets and not stats.contexts and stats.aborted == 0


async def test_messages_over_the_rate_are_refused_and_the_socket_goes_on(gateway):
    limit = SocketLimits().messages_per_s
    async with gateway.http.ws_connect(ws_url(gateway)) as ws:
        for _ in range(int(4 * limit)):  # far past the burst, at once
            await ws.send_json({"text": ""})  # keep-alives: nothing to say back
        replies = await messages_until(ws, lambda m: bool(m))
        assert replies[0]["error"] == "rate_limited", replies
        await asyncio.sleep(2.5)  # the bucket refills: a burst of 2x the rate takes 2 s
        while True:  # the rest of the refusals, already on their way
            try:
                async with asyncio.timeout(0.5):
                    msg = await ws.receive()
            except TimeoutError:
                break
            assert json.loads(msg.data)["error"] == "rate_limited"
        await ws.send_json({"text": "Still here.", "context_id": "c0", "flush": True})
        await ws.send_json({"context_id": "c0", "close_context": True})
        msgs = await messages_until(ws, finals)
        assert finals(msgs) == ["c0"] and audio_of(msgs).size > 0
