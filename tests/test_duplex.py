"""Full duplex over one peer connection: a microphone (a recording spoken in real time by an
aiortc peer) -> VAD -> Whisper -> the echo agent -> speech, with barge-in (real UDP, real Whisper
tiny.en, questions spoken by espeak-ng in a voice other than the gateway's)."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from gateway import aiortc_compat
from gateway.testing.mic_track import RecordedMic
from gateway.testing.spoken_audio import concat, have_espeak, noise, silence, speak, trim
from tests.installed import need_module, needs

faster_whisper = need_module("faster_whisper", "the [listen] extra")
# serial: Whisper and the VAD on the CPU against a microphone paced in real time (barge-in's
# 80-200 ms pause, the speculation finished while the turn model decides)
pytestmark = [
    pytest.mark.asr,
    pytest.mark.serial,
    needs("espeak-ng", have_espeak(), "speaks the questions (Debian)"),
]


class Talk:
    """A talking peer: its microphone, the reply packets it receives, the session's events."""

    def __init__(self, gateway, mic: RecordedMic) -> None:
        self.gateway, self.mic = gateway, mic
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.transceiver = self.pc.addTransceiver(mic, direction="sendrecv")
        self.packets: list = []
        aiortc_compat.tap_rtp(self.transceiver.receiver, lambda p, t: self.packets.append(p))
        self.events: list[tuple[str, dict]] = []
        self.changed = asyncio.Event()
        self._reader: asyncio.Task | None = None

    async def start(self) -> None:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with self.gateway.http.post(
            f"{self.gateway.url}/v1/sessions", data=self.pc.localDescription.sdp,
            headers={"Content-Type": "application/sdp"},
        ) as r:
            assert r.status == 201, await r.text()
            self.location = self.gateway.url + r.headers["Location"]
            answer = await r.text()
        assert "a=sendrecv" in answer
        self._sse = await self.gateway.http.get(f"{self.location}/events")
        self._reader = asyncio.create_task(self._read())
        await self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))

    async def _read(self) -> None:
        kind = None
        async for raw in self._sse.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                self.events.append((kind, json.loads(line[6:])))
                self.changed.set()

    async def until(self, predicate, timeout: float = 30.0):
        async def wait() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout)

    def of(self, kind: str) -> list[dict]:
        return [data for k, data in self.events if k == kind]

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        self._sse.close()
        await self.pc.close()


@pytest.fixture
async def talking(start_gateway):
    talks: list[Talk] = []

    async def make(pcm, **overrides) -> Talk:
        gateway = await start_gateway(duplex=True, **overrides)
        talk = Talk(gateway, RecordedMic(pcm, 16_000))
        talks.append(talk)
        await talk.start()
        return talk

    yield make
    for talk in talks:
        await talk.close()


async def test_a_question_is_heard_answered_and_spoken(talking):
    talk = await talking(concat(speak("What time is it in London?"), silence(1.5)))
    await talk.until(lambda: any(t["final"] for t in talk.of("transcript")))
    final = next(t for t in talk.of("transcript") if t["final"])
    assert "time" in final["text"].lower() and "london" in final["text"].lower()
    await talk.until(lambda: talk.of("reply"))
    reply = talk.of("reply")[0]
    assert reply["text"].startswith("You said")
    speaking = len(talk.packets)
    await talk.until(lambda: any(u["id"] == reply["utterance"] and u["state"] == "done"
                                 for u in talk.of("utterance")))
    assert len(talk.packets) > speaking  # the reply's audio reached the peer
    assert [k for k, _ in talk.events].index("speech_started") < \
        [k for k, _ in talk.events].index("speech_stopped")
    async with talk.gateway.http.get(talk.location) as r:
        state = await r.json()
    (turn,) = state["duplex"]["turns"]
    assert turn["latency_ms"]["end_of_speech_to_audio"] is not None
    assert state["direction"] == "sendrecv" and state["uplink"]["received"] > 50


async def test_a_pause_inside_a_sentence_is_one_turn(talking):
    # trimmed: espeak-ng ends each phrase with ≈0.4 s of silence of its own
    pcm = concat(trim(speak("I would like to order")), silence(0.3),
                 trim(speak("a large pizza please")), silence(1.5))
    talk = await talking(pcm)
    await talk.until(lambda: any(t["final"] for t in talk.of("transcript")))
    await asyncio.sleep(0.6)  # long enough for a second turn to have been declared, if any
    assert len(talk.of("speech_started")) == 1
    final = next(t for t in talk.of("transcript") if t["final"])
    assert "order" in final["text"].lower() and "please" in final["text"].lower()


async def test_talking_over_a_reply_cuts_it_but_a_noise_burst_does_not(talking):
    # replies in the 30 s "long" voice: something to talk over
    talk = await talking(concat(speak("Tell me a long story."), silence(1.0)),
                         reply_voice="long", barge_in_ms=300)
    await talk.until(lambda: talk.of("reply"))
    utterance = talk.of("reply")[0]["utterance"]
    await talk.until(lambda: any(u["id"] == utterance and u["state"] == "playing"
                                 for u in talk.of("utterance")))
    talk.mic.play(concat(noise(0.1, level=0.3), silence(1.2)))  # a cough
    await talk.mic.finished.wait()
    assert not talk.of("interrupted")
    talk.mic.play(concat(trim(speak("Please stop talking now and listen to me")), silence(1.0)))
    try:
        await talk.until(lambda: any(e["utterance"] == utterance
                                     for e in talk.of("interrupted")), timeout=15)
    except TimeoutError:
        raise AssertionError(talk.events) from None
    session = next(iter(talk.gateway.registry))
    cut = session.speaker.get(utterance)
    assert cut.state.value == "interrupted"
    # the user's first voiced frame as the gateway heard it -> the reply paused: 100 ms of
    # voice and at most 100 ms more (the VAD's 32 ms window, a frame or two) ...
    paused_heard_at, paused_at = session.duplex.last_pause
    # (arrival times: 80 ms nominal from the onset frame's arrival, so the lower bound leaves a
    # frame of network jitter -- 0.08 failed at 79.1 and 79.7 ms; a pause on the onset itself
    # would be 0-20 ms)
    assert 0.06 <= paused_at - paused_heard_at <= 0.1 + 0.1, paused_at - paused_heard_at
    # ... -> cut: the voice went on while paused (100 ms of grace + 600 ms), or words heard
    # (speech has gaps, and the partial transcript may come first: a loose bound)
    heard_at, cut_at = session.duplex.last_barge_in
    # (heard on the playout clock: a stalled loop plays a few frames back to back)
    assert 0.3 <= cut.finished_at - heard_at <= 1.5, cut.finished_at - heard_at
    assert cut.finished_at - cut_at < 0.01  # the cut itself is immediate
    # ... and from the microphone, uplink included (network, a shallow jitter buffer)
    print(f"barge-in: {(cut.finished_at - talk.mic.started_at) * 1000:.0f} ms after the "
          f"first spoken frame left the microphone")
    # and the new turn is heard
    await talk.until(lambda: len([t for t in talk.of("transcript") if t["final"]]) >= 2)


async def test_an_llm_reply_is_spoken_before_it_is_complete_and_a_failure_is_an_event(talking):
    from gateway.testing.chat_server import ChatStandIn, StandInConfig

    tokens = ("Sure", ",", " I", " can", " help", " with", " that", ".", " The", " rest",
              " of", " this", " answer", " comes", " later", ".")
    async with ChatStandIn(StandInConfig(tokens=tokens, gate_after=8)) as chat:
        chat.gate = asyncio.Event()  # hold the stream after "Sure, I can help with that."
        chat.faults = [None, "http500"]
        spec = f"openai+{chat.url}?model=stand-in&system=Be%20brief."
        pcm = concat(speak("Can you help me with my order?"), silence(1.5))
        talk = await talking(pcm, agent=spec)
        await talk.until(lambda: talk.of("reply"))
        first = talk.of("reply")[0]
        await talk.until(lambda: any(u["id"] == first["utterance"] and u["state"] == "playing"
                                     for u in talk.of("utterance")))
        assert chat.requests[0].outcome == "pending"  # speaking while the reply is unfinished
        body = chat.requests[0].body
        assert body["stream"] is True and body["messages"][0] == {"role": "system",
                                                                  "content": "Be brief."}
        chat.gate.set()
        await talk.until(lambda: any("later" in r["text"] for r in talk.of("reply")))
        said = {r["utterance"] for r in talk.of("reply")}
        await talk.until(lambda: said <= {u["id"] for u in talk.of("utterance")
                                          if u["state"] == "done"})  # heard to the end
        # the next turn's LLM request fails: an error event, and the session lives on
        talk.mic.play(concat(speak("And what about tomorrow?"), silence(1.5)))
        await talk.until(lambda: talk.of("error"))
        assert talk.of("error")[0]["code"] == "agent_failed"
        async with talk.gateway.http.get(talk.location) as r:
            state = await r.json()
        assert state["connection_state"] == "connected"
        assert state["duplex"]["turns"][-1]["error"]
        # history: the second request carried the first exchange
        assert [m["role"] for m in chat.requests[1].body["messages"]] == [
            "system", "user", "assistant", "user"]


async def test_the_turn_model_ends_a_finished_question(talking):
    pcm = concat(speak("Can you tell me the weather for tomorrow?"), silence(2.0))
    talk = await talking(pcm, turn_detector="smart-turn")
    await talk.until(lambda: talk.of("reply"))
    final = next(t for t in talk.of("transcript") if t["final"])
    assert "weather" in final["text"].lower()
    async with talk.gateway.http.get(talk.location) as r:
        state = await r.json()
    duplex = state["duplex"]
    assert duplex["turn_detector"] == "smart-turn"
    assert duplex["turn_model"]["inferences"] >= 1 and duplex["turn_model"]["failures"] == 0
    (turn,) = duplex["turns"]
    # the final is the speculation decoded while the model decided (the reply is prepared
    # on it when it comes before the end: test_listen_semantic, the order is exact there)
    assert turn["asr"]["speculative"]


async def test_talking_over_pauses_first_and_the_history_keeps_what_the_client_received(talking):
    from gateway.conversation.heard import heard_words
    from gateway.tts.registry import VoiceRegistry
    from gateway.tts.tone import ToneSynthesizer

    # one 4 s chunk per clause, as Piper gives one per sentence: its length is known at once
    voices = VoiceRegistry([ToneSynthesizer(name="clause", frequency=330.0, seconds=4.0,
                                            chunk_ms=4000)])
    question = "Please book a table for four people at the Italian place near the station."
    talk = await talking(concat(speak(question), silence(1.0)), voices=voices,
                         reply_voice="clause")
    await talk.until(lambda: len(talk.of("reply")) >= 2)  # "You said:" and the question
    second = talk.of("reply")[1]["utterance"]
    await talk.until(lambda: any(u["id"] == second and u["state"] == "playing"
                                 for u in talk.of("utterance")))
    await asyncio.sleep(0.5)
    talk.mic.play(concat(noise(0.15, level=0.3), silence(1.2)))  # a cough: pause, resume
    await talk.mic.finished.wait()
    await asyncio.sleep(0.3)
    assert not talk.of("interrupted")
    session = next(iter(talk.gateway.registry))
    assert session.duplex.state()["reply_pauses"] == session.duplex.state()["reply_resumes"]
    talk.mic.play(concat(trim(speak("Stop, I have changed my mind")), silence(1.2)))
    await talk.until(lambda: talk.of("interrupted"), timeout=15)
    # the pause came within 100 ms voiced + the VAD's window and a frame or two of the onset
    heard_at, paused_at = session.duplex.last_pause
    assert 0.06 <= paused_at - heard_at <= 0.1 + 0.1, paused_at - heard_at  # (jitter: above)
    await talk.until(lambda: len([t for t in talk.of("transcript") if t["final"]]) >= 2)
    (first, *_rest) = session.duplex.turns
    assert first.interrupted and first.heard_text is not None
    # what the client received of each of the turn's utterances (its packets by sequence
    # number), mapped to words the same way: the committed text is within one word of it
    received = []
    for utterance, clause in zip(first.utterances, first.reply, strict=True):
        delivery = utterance.primary
        if delivery is None or delivery.first_seq is None:
            continue
        seqs = {p.sequence_number for p in talk.packets}
        got = sum(1 for k in range(delivery.frames)
                  if (delivery.first_seq + k) & 0xFFFF in seqs)
        total = utterance.total_frames or utterance.frames_rendered
        received.append(heard_words(clause, got / total))
    expected = " ".join(r for r in received if r).split()
    committed = first.heard_text.split()
    assert committed and abs(len(committed) - len(expected)) <= 1, (committed, expected)
    assert committed[: len(expected) - 1] == expected[: len(committed) - 1]
    assert len(committed) < len(" ".join(first.reply).split())  # not the unspoken rest
    history = [m.content for m in session.duplex.history]
    assert history[:2] == [first.text, first.heard_text]
    cut = [e for e in talk.of("interrupted") if e["heard_ms"]]
    assert cut and all(e["heard_text"] is not None for e in talk.of("interrupted"))
