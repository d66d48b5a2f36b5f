"""The OpenAI Realtime API over WebSocket, driven by the official ``openai`` SDK unmodified
(``client.realtime.connect()``, with ``websockets``) against the live gateway: real Whisper
tiny.en, real VAD, questions spoken by espeak-ng in real time, the tone voices replying."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time

import aiohttp
import numpy as np
import pytest
import soxr

from gateway.realtime.audio_formats import PCMU, decode_g711
from gateway.realtime.protocol import MAX_APPEND_BYTES
from gateway.testing.spoken_audio import concat, have_espeak, silence, speak, trim
from tests.helpers import dominant_frequency
from tests.installed import missing, need_module, needs

openai = need_module("openai", "the dev tools (the official SDK)")
need_module("websockets", "the dev tools (the openai SDK's realtime transport)")
need_module("faster_whisper", "the [listen] extra")
pytestmark = [pytest.mark.asr]
needs_espeak = needs("espeak-ng", have_espeak(), "speaks the questions (Debian)")


def pcm24k(pcm16k: np.ndarray) -> bytes:
    out = soxr.resample(pcm16k.astype(np.float32) / 32768, 16_000, 24_000, quality="HQ")
    return np.clip(np.round(out * 32767), -32768, 32767).astype("<i2").tobytes()


class Client:
    """One SDK connection and every server event it received, in order."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.events: list = []
        self.changed = asyncio.Event()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.conn:
            event.received_at = time.monotonic()
            self.events.append(event)
            self.changed.set()

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]

    async def until(self, predicate, timeout: float = 30.0):
        async def wait():
            while not (found := predicate()):
                self.changed.clear()
                await self.changed.wait()
            return found

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError([e.type for e in self.events]) from None

    async def first(self, kind: str, timeout: float = 30.0, after: int = 0):
        return await self.until(lambda: next(iter(self.of(kind)[after:]), None), timeout)

    async def stream(self, pcm: bytes, chunk_ms: int = 100) -> None:
        """``pcm`` (24 kHz) appended in real time, ``chunk_ms`` at a time."""
        step = 24_000 * 2 * chunk_ms // 1000
        started = time.monotonic()
        for n, at in enumerate(range(0, len(pcm), step)):
            await self.conn.input_audio_buffer.append(
                audio=base64.b64encode(pcm[at:at + step]).decode())
            await asyncio.sleep(max(0.0, started + (n + 1) * chunk_ms / 1000 - time.monotonic()))

    def audio(self, response_id: str | None = None) -> bytes:
        return b"".join(base64.b64decode(e.delta) for e in self.of("response.output_audio.delta")
                        if response_id in (None, e.response_id))


@pytest.fixture
async def realtime(start_gateway):
    clients: list = []

    async def make(api_key: str = "unused", **overrides):
        gateway = await start_gateway(duplex=True, **overrides)
        sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=api_key, max_retries=0)
        manager = sdk.realtime.connect(model="gpt-realtime", max_retries=0)
        conn = await manager.enter()
        client = Client(conn)
        client.gateway = gateway
        clients.append(client)
        await client.first("session.created")
        return client

    yield make
    for client in clients:
        client._task.cancel()
        await client.conn.close()


async def test_a_text_turn_is_heard_as_24khz_audio_with_its_transcript(realtime):
    rt = await realtime()
    created = rt.of("session.created")[0].session
    assert created.audio.output.format.type == "audio/pcm" and created.audio.output.format.rate \
        == 24_000
    # the session is one of ours: GET /v1/sessions/{id}
    async with rt.gateway.http.get(f"{rt.gateway.url}/v1/sessions/{created.id}") as r:
        assert r.status == 200
        assert (await r.json())["transport"] == "realtime-websocket"
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Hello there"}]})
    added = await rt.first("conversation.item.added")
    await rt.conn.response.create()
    done = await rt.first("response.done")
    assert done.response.status == "completed"
    response_id = done.response.id
    kinds = [e.type for e in rt.events]
    order = ["response.created", "response.output_item.added", "response.content_part.added",
             "response.output_audio_transcript.delta", "response.output_audio.delta",
             "response.output_audio.done", "response.output_audio_transcript.done",
             "response.content_part.done", "response.output_item.done", "response.done"]
    assert [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order)
    transcript = rt.of("response.output_audio_transcript.done")[0].transcript
    assert transcript == "You said: Hello there"
    assert "".join(e.delta for e in rt.of("response.output_audio_transcript.delta")) == transcript
    pcm = np.frombuffer(rt.audio(response_id), dtype="<i2")
    assert len(pcm) == 2 * 24_000  # two clauses of the 1 s tone, 24 kHz
    assert abs(dominant_frequency(pcm, 24_000) - 440.0) < 2.0  # audible: the tone itself
    assert np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 1000
    item = done.response.output[0]
    assert item.role == "assistant" and item.status == "completed"
    assert item.content[0].transcript == transcript
    assert len({e.event_id for e in rt.events}) == len(rt.events)  # every event_id unique
    assert all(e.item_id == item.id for e in rt.of("response.output_audio.delta"))
    assert added.item.content[0].text == "Hello there"


async def test_text_modality_streams_text_and_no_audio(realtime):
    rt = await realtime()
    await rt.conn.session.update(session={"type": "realtime", "output_modalities": ["text"]})
    await rt.first("session.updated")
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "one two three"}]})
    await rt.conn.response.create()
    done = await rt.first("response.done")
    assert done.response.status == "completed"
    assert not rt.of("response.output_audio.delta")
    text = rt.of("response.output_text.done")[0].text
    assert text == "You said: one two three"
    assert "".join(e.delta for e in rt.of("response.output_text.delta")) == text


@needs_espeak
async def test_semantic_vad_is_served_by_the_turn_model(realtime):
    need_module("onnxruntime", "the [listen] extra (the Smart Turn model)")
    rt = await realtime()
    await rt.conn.session.update(session={"type": "realtime", "audio": {"input": {
        "transcription": {"model": "whisper-1"},
        "turn_detection": {"type": "semantic_vad", "eagerness": "auto"}}}})
    updated = await rt.first("session.updated")
    assert updated.session.audio.input.turn_detection.type == "semantic_vad"
    sid = rt.of("session.created")[0].session.id
    async with rt.gateway.http.get(f"{rt.gateway.url}/v1/sessions/{sid}") as r:
        state = (await r.json())["realtime"]
    assert state["turn_detection"] == "semantic_vad" and state["turn_detector"] == "smart-turn"
    await rt.stream(pcm24k(concat(speak("Please turn off the lights in the kitchen."),
                                  silence(2.0))))
    completed = await rt.first("conversation.item.input_audio_transcription.completed", 60)
    assert "kitchen" in completed.transcript.lower(), completed.transcript
    done = await rt.first("response.done", 60)
    assert done.response.status == "completed"
    await rt.conn.session.update(session={"type": "realtime", "audio": {"input": {
        "turn_detection": {"type": "server_vad"}}}})
    await rt.first("session.updated", after=1)
    async with rt.gateway.http.get(f"{rt.gateway.url}/v1/sessions/{sid}") as r:
        assert (await r.json())["realtime"]["turn_detector"] == "silence"


@needs_espeak
async def test_a_spoken_question_is_detected_transcribed_and_answered(realtime):
    rt = await realtime()
    await rt.conn.session.update(session={"type": "realtime", "audio": {"input": {
        "transcription": {"model": "whisper-1"},
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}})
    await rt.first("session.updated")
    await rt.stream(pcm24k(concat(speak("What time is it in London?"), silence(1.5))))
    started = await rt.first("input_audio_buffer.speech_started")
    stopped = await rt.first("input_audio_buffer.speech_stopped")
    assert stopped.item_id == started.item_id
    assert 0 <= started.audio_start_ms < stopped.audio_end_ms
    committed = await rt.first("input_audio_buffer.committed")
    assert committed.item_id == started.item_id
    completed = await rt.first("conversation.item.input_audio_transcription.completed")
    assert completed.item_id == started.item_id
    words = completed.transcript.lower()
    assert "time" in words and "london" in words, words
    done = await rt.first("response.done")
    assert done.response.status == "completed"
    assert rt.of("response.created")[0].received_at > completed.received_at
    assert len(rt.audio(done.response.id)) > 24_000  # the reply's audio
    transcript = rt.of("response.output_audio_transcript.done")[0].transcript
    assert transcript.startswith("You said") and "london" in transcript.lower()


@needs_espeak
async def test_talking_over_a_long_reply_cancels_it_and_no_delta_follows(realtime):
    rt = await realtime(reply_voice="long")  # a 30 s tone: something to talk over
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user", "content": [{"type": "input_text",
                                                         "text": "tell me a story"}]})
    await rt.conn.response.create()
    first = await rt.first("response.output_audio.delta")
    await rt.stream(pcm24k(concat(silence(0.3), trim(speak("Please stop talking now")),
                                  silence(1.0))))
    done = await rt.first("response.done", timeout=15)
    assert done.response.status == "cancelled"
    assert done.response.status_details.reason == "turn_detected"
    assert done.response.output[0].status == "incomplete"
    done_at = rt.events.index(done)
    await asyncio.sleep(0.5)
    later = [e for e in rt.events[done_at:] if e.type == "response.output_audio.delta"
             and e.response_id == first.response_id]
    assert not later
    # far less than the 30 s reply was sent (paced at real time + a lead)
    assert len(rt.audio(first.response_id)) < 24_000 * 2 * 8
    # and the user's new turn was heard and is answered (in the long voice again)
    second = await rt.first("response.created", after=1)
    assert second.response.id != first.response_id
    await rt.until(lambda: any(e.response_id == second.response.id
                               for e in rt.of("response.output_audio.delta")))


@needs_espeak
async def test_manual_commit_then_response_create(realtime):
    rt = await realtime()
    await rt.conn.session.update(session={"type": "realtime", "audio": {"input": {
        "turn_detection": None, "transcription": {"model": "whisper-1"}}}})
    updated = await rt.first("session.updated")
    assert updated.session.audio.input.turn_detection is None
    audio = pcm24k(concat(speak("Open the pod bay doors"), silence(0.3)))
    for at in range(0, len(audio), 9600):  # faster than real time: nothing listens to it
        await rt.conn.input_audio_buffer.append(audio=base64.b64encode(audio[at:at + 9600])
                                                .decode())
    await asyncio.sleep(0.3)
    assert not rt.of("input_audio_buffer.speech_started")  # no VAD: the client commits
    await rt.conn.input_audio_buffer.commit()
    committed = await rt.first("input_audio_buffer.committed")
    await rt.conn.response.create()  # before its transcription: the response waits for it
    done = await rt.first("response.done")
    completed = rt.of("conversation.item.input_audio_transcription.completed")[0]
    assert completed.item_id == committed.item_id
    assert "door" in completed.transcript.lower()
    transcript = rt.of("response.output_audio_transcript.done")[0].transcript
    assert "door" in transcript.lower()
    assert done.response.status == "completed"
    # a commit of an empty buffer is an error, then clear
    await rt.conn.input_audio_buffer.commit(event_id="evt_empty")
    error = await rt.first("error")
    assert error.error.code == "input_audio_buffer_commit_empty"
    assert error.error.event_id == "evt_empty"
    await rt.conn.input_audio_buffer.clear()
    await rt.first("input_audio_buffer.cleared")


async def test_truncate_keeps_what_was_heard(realtime):
    rt = await realtime()
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "alpha beta gamma delta epsilon"}]})
    await rt.conn.response.create()
    done = await rt.first("response.done")
    item = done.response.output[0]
    # "You said:" (1 s of tone) then "alpha beta gamma delta epsilon" (1 s): 1.4 s heard
    await rt.conn.conversation.item.truncate(item_id=item.id, content_index=0,
                                             audio_end_ms=1400)
    truncated = await rt.first("conversation.item.truncated")
    assert (truncated.item_id, truncated.audio_end_ms) == (item.id, 1400)
    await rt.conn.conversation.item.retrieve(item_id=item.id)
    retrieved = await rt.first("conversation.item.retrieved")
    assert retrieved.item.content[0].transcript == "You said: alpha beta"
    # past the item's audio, or of a user item: errors
    await rt.conn.conversation.item.truncate(item_id=item.id, content_index=0,
                                             audio_end_ms=60_000, event_id="evt_far")
    error = await rt.first("error")
    assert (error.error.code, error.error.event_id) == ("invalid_value", "evt_far")
    # the next response hears the truncated history (the echo agent ignores it, but the
    # item is what the agent would be given)
    await rt.conn.conversation.item.delete(item_id=item.id)
    deleted = await rt.first("conversation.item.deleted")
    assert deleted.item_id == item.id


async def test_bad_events_are_errors_and_the_session_goes_on(realtime):
    rt = await realtime()
    await rt.conn.send_raw("{not json")
    await rt.conn.send_raw('["an", "array"]')
    await rt.conn.send({"type": "no.such.event", "event_id": "evt_1"})
    await rt.conn.input_audio_buffer.append(audio="###not base64###", event_id="evt_2")
    await rt.conn.input_audio_buffer.append(audio=base64.b64encode(b"\x01\x02\x03").decode(),
                                            event_id="evt_3")  # 1.5 samples
    big = base64.b64encode(bytes(MAX_APPEND_BYTES + 2)).decode()
    await rt.conn.input_audio_buffer.append(audio=big, event_id="evt_4")
    await rt.conn.send({"type": "session.update", "event_id": "evt_5",
                        "session": {"type": "realtime", "bogus": 1}})
    await rt.conn.conversation.item.retrieve(item_id="item_nope", event_id="evt_6")
    await rt.conn.response.cancel(event_id="evt_7")
    await rt.conn.send({"type": "session.update", "event_id": "evt_8", "session": {
        "type": "realtime", "audio": {"output": {"voice": "no-such-voice"}}}})
    await rt.until(lambda: len(rt.of("error")) >= 10)
    errors = [(e.error.event_id, e.error.code) for e in rt.of("error")]
    assert errors == [
        (None, "invalid_json"), (None, "invalid_json"), ("evt_1", "invalid_event_type"),
        ("evt_2", "invalid_audio"), ("evt_3", "invalid_audio"), ("evt_4", "audio_too_large"),
        ("evt_5", "unknown_parameter"), ("evt_6", "item_not_found"),
        ("evt_7", "response_cancel_not_active"), ("evt_8", "unknown_voice")]
    assert "no.such.event" in rt.of("error")[2].error.message
    assert all(e.error.type == "invalid_request_error" for e in rt.of("error"))
    # ... and the session goes on
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "ok"}]})
    await rt.conn.response.create()
    done = await rt.first("response.done")
    assert done.response.status == "completed"


async def test_g711_in_and_out_and_a_cancel_by_the_client(realtime):
    rt = await realtime(reply_voice="long")
    await rt.conn.session.update(session={"type": "realtime", "audio": {
        "input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}})
    updated = await rt.first("session.updated")
    assert updated.session.audio.output.format.type == "audio/pcmu"
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    await rt.conn.response.create()
    await rt.until(lambda: len(rt.of("response.output_audio.delta")) >= 10)
    await rt.conn.response.cancel()
    done = await rt.first("response.done")
    assert (done.response.status, done.response.status_details.reason) == \
        ("cancelled", "client_cancelled")
    ulaw = rt.audio()
    pcm = decode_g711(ulaw, PCMU)
    assert abs(dominant_frequency(pcm[4000:], 8_000) - 330.0) < 3.0  # the "long" tone, 8 kHz
    count = len(rt.of("response.output_audio.delta"))
    await asyncio.sleep(0.5)
    assert len(rt.of("response.output_audio.delta")) == count


async def test_auth_caps_and_delete(start_gateway):
    gateway = await start_gateway(duplex=True, auth_tokens=("s3cret",), max_sessions=1)
    url = f"{gateway.url}/v1"
    bad = openai.AsyncOpenAI(base_url=url, api_key="wrong", max_retries=0)
    with pytest.raises(Exception) as refused:
        await bad.realtime.connect(model="m", max_retries=0).enter()
    assert "401" in str(refused.value)
    good = openai.AsyncOpenAI(base_url=url, api_key="s3cret", max_retries=0)
    conn = await good.realtime.connect(model="m", max_retries=0).enter()
    created = await conn.recv()
    assert created.type == "session.created"
    with pytest.raises(Exception) as full:  # the cap counts Realtime sessions too
        await good.realtime.connect(model="m", max_retries=0).enter()
    assert "503" in str(full.value)
    async with gateway.http.delete(f"{gateway.url}/v1/sessions/{created.session.id}",
                                   headers={"Authorization": "Bearer s3cret"}) as r:
        assert r.status == 204
    with pytest.raises(Exception):  # noqa: B017 - the server closed it
        while True:
            await asyncio.wait_for(conn.recv(), 5)
    assert len(gateway.registry) == 0


async def test_a_browser_style_socket_beta_names_and_the_key_in_a_subprotocol(start_gateway):
    """What browser SDKs send: no headers, the key and the beta flag as subprotocols."""
    gateway = await start_gateway(duplex=True, auth_tokens=("s3cret",))
    url = f"{gateway.url}/v1/realtime?model=gpt-4o-realtime-preview"
    protocols = ("realtime", "openai-insecure-api-key.s3cret", "openai-beta.realtime-v1")
    async with gateway.http.ws_connect(url, protocols=protocols) as ws:
        assert ws.protocol == "realtime"
        created = await ws.receive_json(timeout=10)
        assert created["type"] == "session.created"
        assert created["session"]["modalities"] == ["text", "audio"]  # the beta shape
        await ws.send_json({"type": "session.update", "session": {
            "modalities": ["text"], "output_audio_format": "g711_ulaw"}})
        updated = await ws.receive_json(timeout=10)
        assert updated["session"]["output_audio_format"] == "g711_ulaw"
        await ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "x"}]}})
        await ws.send_json({"type": "response.create"})
        kinds = []
        while "response.done" not in kinds:
            kinds.append((await ws.receive_json(timeout=10))["type"])
        assert "response.text.delta" in kinds and "response.text.done" in kinds
        assert "conversation.item.created" in kinds
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gateway.http.ws_connect(url, protocols=("realtime", "openai-insecure-api-key.no"))
    assert refused.value.status == 401


async def test_function_calling_through_the_chat_backend(realtime):
    from gateway.testing.chat_server import ChatStandIn, StandInConfig

    def calls(body):
        answered = any(m["role"] == "tool" for m in body["messages"])
        return [] if answered else [("get_weather", '{"city": "Paris"}')]

    config = StandInConfig(tokens=("It", " is", " sunny", " in", " Paris", "."), tool_calls=calls)
    async with ChatStandIn(config) as chat:
        rt = await realtime(agent=f"openai+{chat.url}?model=stand-in")
        tool = {"type": "function", "name": "get_weather", "description": "The weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
        await rt.conn.session.update(session={"type": "realtime", "tools": [tool],
                                              "output_modalities": ["text"]})
        await rt.first("session.updated")
        await rt.conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Weather in Paris?"}]})
        await rt.conn.response.create()
        done = await rt.first("response.done")
        assert done.response.status == "completed"
        (call,) = done.response.output
        assert (call.type, call.name, call.arguments) == ("function_call", "get_weather",
                                                         '{"city": "Paris"}')
        args_done = rt.of("response.function_call_arguments.done")[0]
        assert (args_done.call_id, args_done.arguments) == (call.call_id, call.arguments)
        pieces = "".join(e.delta for e in rt.of("response.function_call_arguments.delta"))
        assert pieces == call.arguments
        assert not rt.of("response.output_text.delta")  # a call, no message
        body = chat.requests[0].body
        assert body["tools"][0]["function"]["name"] == "get_weather"
        # the app runs the function and gives its output back
        await rt.conn.conversation.item.create(item={
            "type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sun"}'})
        await rt.conn.response.create()
        second = await rt.first("response.done", after=1)
        assert second.response.status == "completed"
        assert rt.of("response.output_text.done")[0].text == "It is sunny in Paris."
        messages = chat.requests[1].body["messages"]
        assert messages[-2]["tool_calls"][0]["id"] == call.call_id
        assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id,
                                "content": '{"sky": "sun"}'}


async def test_drain_and_idle_close_realtime_sockets(start_gateway):
    gateway = await start_gateway(duplex=True, idle_timeout_s=0.6)
    url = f"{gateway.url}/v1/realtime?model=m"
    silence_chunk = base64.b64encode(bytes(4800)).decode()
    started = time.monotonic()
    async with gateway.http.ws_connect(url) as ws:
        assert (await ws.receive_json(timeout=10))["type"] == "session.created"
        while not ws.closed and time.monotonic() - started < 5:  # silence only: idle
            await ws.send_json({"type": "input_audio_buffer.append", "audio": silence_chunk})
            with contextlib.suppress(TimeoutError):
                await ws.receive(timeout=0.1)
        assert ws.closed and 0.6 <= time.monotonic() - started < 5
    gateway = await start_gateway(duplex=True)
    async with gateway.http.ws_connect(f"{gateway.url}/v1/realtime?model=m") as ws:
        assert (await ws.receive_json(timeout=10))["type"] == "session.created"
        await gateway.registry.drain(1.0)
        closing = await ws.receive(timeout=5)
        assert closing.type is aiohttp.WSMsgType.CLOSE and closing.data == 1001
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gateway.http.ws_connect(f"{gateway.url}/v1/realtime?model=m")
    assert refused.value.status == 503


@needs_espeak
@pytest.mark.voice
async def test_piper_answers_a_spoken_question_in_words_whisper_understands(start_gateway):
    """The whole loop with the real voice: espeak-ng asks, Whisper hears, Piper answers over
    the Realtime socket, and Whisper (the gateway's own recogniser) hears the answer's words."""
    piper_voice = pytest.importorskip("gateway.tts.piper_voice")
    if not piper_voice.piper_available():
        missing("the [voice] extra", "Piper answers")
    from gateway.tts.registry import VoiceRegistry

    gateway = await start_gateway(voices=VoiceRegistry([piper_voice.PiperSynthesizer(
        name="joe")]), duplex=True)
    sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    conn = await sdk.realtime.connect(model="gpt-realtime", max_retries=0).enter()
    rt = Client(conn)
    try:
        await rt.first("session.created")
        await rt.stream(pcm24k(concat(speak("Where is the nearest train station?"),
                                      silence(1.5))))
        done = await rt.first("response.done")
        assert done.response.status == "completed"
        pcm = np.frombuffer(rt.audio(done.response.id), dtype="<i2")
        assert len(pcm) > 24_000  # over a second of speech
        heard = soxr.resample(pcm.astype(np.float32) / 32768, 24_000, 16_000)
        recognizer = gateway.registry.duplex.recognizer
        words = (await recognizer.transcribe(heard, final=True)).text.lower()
        assert "train" in words and "station" in words, words
    finally:
        rt._task.cancel()
        await conn.close()


async def test_client_events_over_the_rate_are_refused_and_the_session_goes_on(realtime):
    from gateway.realtime.websocket import MESSAGES_PER_S

    rt = await realtime()
    for _ in range(int(3 * MESSAGES_PER_S)):  # past the burst (twice the rate), at once
        await rt.conn.send_raw('{"type": "input_audio_buffer.clear"}')
    await rt.until(lambda: any(e.error.code == "rate_limited" for e in rt.of("error")))
    await asyncio.sleep(2.5)  # the bucket refills
    await rt.conn.conversation.item.create(item={
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "ok"}]})
    await rt.conn.response.create()
    done = await rt.first("response.done")
    assert done.response.status == "completed"
