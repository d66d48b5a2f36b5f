"""Realtime over WebRTC: ``client.realtime.calls.create()`` (the official SDK, unmodified)
posts an aiortc peer's offer -- one sendrecv audio m-line (a microphone speaking espeak-ng
in real time) and the ``oai-events`` data channel -- and the call is a session of ours:
events on the channel, the reply on the RTP track, the microphone heard end to end."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from gateway.testing.mic_track import RecordedMic
from gateway.testing.spoken_audio import concat, have_espeak, silence, speak
from tests.helpers import dominant_frequency
from tests.installed import need_module, needs

openai = need_module("openai", "the dev tools (the official SDK)")
need_module("faster_whisper", "the [listen] extra")
pytestmark = [pytest.mark.asr]


class Peer:
    """An aiortc caller: a microphone, the decoded reply, the channel's events."""

    def __init__(self, mic: RecordedMic) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.transceiver = self.pc.addTransceiver(mic, direction="sendrecv")
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: list[dict] = []
        self.changed = asyncio.Event()
        self.opened = asyncio.Event()
        self.pcm: list[np.ndarray] = []  # 48 kHz mono, as aiortc decodes it
        self._tasks: list[asyncio.Task] = []

        @self.channel.on("message")
        def on_message(message: str) -> None:
            self.events.append(json.loads(message))
            self.changed.set()

        self.channel.on("open", self.opened.set)

        @self.pc.on("track")
        def on_track(track) -> None:
            self._tasks.append(asyncio.create_task(self._play(track)))

    async def _play(self, track) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            samples = frame.to_ndarray().reshape(-1, len(frame.layout.channels))[:, 0]
            self.pcm.append(samples.astype(np.int16))

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    async def until(self, predicate, timeout: float = 30.0):
        async def wait():
            while not (found := predicate()):
                self.changed.clear()
                await self.changed.wait()
            return found

        try:
            return await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise AssertionError([e["type"] for e in self.events]) from None

    def send(self, event: dict) -> None:
        self.channel.send(json.dumps(event))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()


@pytest.fixture
async def calling(start_gateway):
    peers: list[Peer] = []

    async def make(pcm: np.ndarray, session: dict | None = None, **overrides):
        gateway = await start_gateway(duplex=True, **overrides)
        peer = Peer(RecordedMic(pcm, 16_000))
        peers.append(peer)
        await peer.pc.setLocalDescription(await peer.pc.createOffer())
        sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
        raw = sdk.realtime.calls.with_raw_response
        response = await raw.create(sdp=peer.pc.localDescription.sdp,
                                    session=session or {"type": "realtime"})
        assert response.http_response.status_code == 201
        peer.location = response.headers["Location"]
        answer = response.http_response.text
        assert "a=sendrecv" in answer and "opus/48000/2" in answer
        await peer.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await asyncio.wait_for(peer.opened.wait(), 10)
        peer.gateway = gateway
        return peer

    yield make
    for peer in peers:
        await peer.close()


async def test_a_call_speaks_a_text_turn_on_its_rtp_track(calling):
    peer = await calling(silence(0.5), session={
        "type": "realtime", "instructions": "Be brief.",
        "audio": {"input": {"turn_detection": None}}})
    created = await peer.until(lambda: peer.of("session.created"))
    session = created[0]["session"]
    assert session["instructions"] == "Be brief."
    assert session["audio"]["input"]["turn_detection"] is None
    call_id = peer.location.rsplit("/", 1)[1]
    assert session["id"] == call_id
    async with peer.gateway.http.get(f"{peer.gateway.url}/v1/sessions/{call_id}") as r:
        state = await r.json()
    assert state["direction"] == "sendrecv" and state["duplex"]["channel"] == "open"
    peer.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}})
    heard_before = len(peer.pcm)
    peer.send({"type": "response.create"})
    done = await peer.until(lambda: peer.of("response.done"))
    assert done[0]["response"]["status"] == "completed"
    kinds = [e["type"] for e in peer.events]
    assert not peer.of("response.output_audio.delta")  # the reply is RTP, not deltas
    assert kinds.index("output_audio_buffer.started") < kinds.index("response.done") \
        < kinds.index("output_audio_buffer.stopped")
    transcript = peer.of("response.output_audio_transcript.done")[0]["transcript"]
    assert transcript == "You said: hi"
    # the reply played on the track: 2 s of the 440 Hz tone (48 kHz as decoded)
    await asyncio.sleep(0.3)
    pcm = np.concatenate(peer.pcm[heard_before:])
    loud = pcm[np.abs(pcm) > 2000]
    assert len(loud) > 48_000  # over a second of it audible
    start = int(np.argmax(np.abs(pcm) > 2000))
    assert abs(dominant_frequency(pcm[start:start + 48_000], 48_000) - 440.0) < 3.0


@needs("espeak-ng", have_espeak(), "speaks the question (Debian)")
async def test_the_microphone_is_heard_and_answered_and_a_barge_in_truncates(calling):
    peer = await calling(concat(speak("What is the weather like in Paris?"), silence(1.0)),
                         session={"type": "realtime", "audio": {"input": {
                             "transcription": {"model": "whisper-1"}}}},
                         reply_voice="long")
    completed = await peer.until(lambda: peer.of(
        "conversation.item.input_audio_transcription.completed"))
    words = completed[0]["transcript"].lower()
    assert "weather" in words and "paris" in words, words
    assert peer.of("input_audio_buffer.speech_started") and \
        peer.of("input_audio_buffer.speech_stopped")
    await peer.until(lambda: peer.of("output_audio_buffer.started"))
    await asyncio.sleep(1.5)  # 1.5 s of the 30 s reply heard, then the user talks over it
    peer.transceiver.sender.track.play(concat(speak("Stop, please stop now"), silence(1.0)))
    done = await peer.until(lambda: peer.of("response.done"), timeout=15)
    response = done[0]["response"]
    assert (response["status"], response["status_details"]["reason"]) == \
        ("cancelled", "turn_detected")
    assert peer.of("output_audio_buffer.cleared")
    truncated = peer.of("conversation.item.truncated")[0]
    assert truncated["item_id"] == response["output"][0]["id"]
    # what the sink sent: the 1.5 s, the barge-in minimum and a little more
    assert 1500 <= truncated["audio_end_ms"] <= 4000, truncated


async def test_the_beta_flow_speaks_beta_event_names(start_gateway):
    gateway = await start_gateway(duplex=True)
    peer = Peer(RecordedMic(silence(0.5), 16_000))
    try:
        await peer.pc.setLocalDescription(await peer.pc.createOffer())
        async with gateway.http.post(
                f"{gateway.url}/v1/realtime?model=gpt-4o-realtime-preview",
                data=peer.pc.localDescription.sdp,
                headers={"Content-Type": "application/sdp", "OpenAI-Beta": "realtime=v1"}) as r:
            assert r.status == 201, await r.text()
            answer = await r.text()
        await peer.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        await asyncio.wait_for(peer.opened.wait(), 10)
        created = (await peer.until(lambda: peer.of("session.created")))[0]["session"]
        assert created["modalities"] == ["text", "audio"]
        assert created["input_audio_format"] == "pcm16"
        peer.send({"type": "session.update", "session": {"modalities": ["text"],
                                                         "turn_detection": None}})
        updated = (await peer.until(lambda: peer.of("session.updated")))[0]["session"]
        assert updated["modalities"] == ["text"] and updated["turn_detection"] is None
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "beta"}]}})
        peer.send({"type": "response.create", "response": {"modalities": ["text", "audio"]}})
        await peer.until(lambda: peer.of("response.done"))
        kinds = {e["type"] for e in peer.events}
        assert {"conversation.item.created", "response.audio_transcript.delta",
                "response.audio_transcript.done", "response.audio.done"} <= kinds
        assert not any(k.startswith(("response.output_audio", "response.output_text"))
                       for k in kinds)
        assert "conversation.item.added" not in kinds
        done = peer.of("response.done")[0]["response"]
        assert done["modalities"] == ["audio"]
        assert done["output"][0]["content"][0]["type"] == "audio"
    finally:
        await peer.close()


async def test_bad_call_requests_are_refused(start_gateway):
    gateway = await start_gateway(duplex=True)
    url = f"{gateway.url}/v1/realtime/calls"
    async with gateway.http.post(url, data="v=0\r\n", headers={
            "Content-Type": "application/sdp"}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"]
    async with gateway.http.post(url, json={"sdp": "x"}) as r:
        assert r.status == 415
    sdk = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    peer = RTCPeerConnection()
    peer.addTransceiver("audio", direction="sendrecv")
    await peer.setLocalDescription(await peer.createOffer())
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.realtime.calls.create(sdp=peer.localDescription.sdp, session={
            "type": "realtime", "audio": {"output": {"voice": "no-such-voice"}}})
    assert refused.value.status_code == 400 and "no-such-voice" in str(refused.value)
    await peer.close()
    assert len(gateway.registry) == 0


async def test_a_backend_steers_the_call_over_its_control_socket(calling):
    peer = await calling(silence(0.5), session={"type": "realtime", "output_modalities": ["text"],
                                                "audio": {"input": {"turn_detection": None}}})
    await peer.until(lambda: peer.of("session.created"))
    call_id = peer.location.rsplit("/", 1)[1]
    sdk = openai.AsyncOpenAI(base_url=f"{peer.gateway.url}/v1", api_key="unused", max_retries=0)
    control = await sdk.realtime.connect(call_id=call_id, max_retries=0).enter()
    try:
        first = await control.recv()
        assert first.type == "session.created" and first.session.id == call_id
        await control.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "from the backend"}]})
        await control.response.create()
        seen = []
        while "response.done" not in seen:
            seen.append((await asyncio.wait_for(control.recv(), 10)).type)
        # the browser's channel saw the same turn
        done = await peer.until(lambda: peer.of("response.done"))
        assert done[0]["response"]["output"][0]["content"][0]["text"] == \
            "You said: from the backend"
        assert "conversation.item.added" in seen and "response.output_text.done" in seen
    finally:
        await control.close()
    await asyncio.sleep(0.2)
    # the call goes on without its control socket
    peer.send({"type": "response.create"})
    await peer.until(lambda: len(peer.of("response.done")) == 2)
    async with peer.gateway.http.get(f"{peer.gateway.url}/v1/realtime?call_id=nope",
                                     headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                              "Sec-WebSocket-Version": "13",
                                              "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
                                     ) as r:
        assert r.status == 404
