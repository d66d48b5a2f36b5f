"""The preemptive reply: on a tentative transcript (the speculative final, decoded while the
turn's end is still awaited) the agent is asked and its first clause rendered, nothing said;
the final transcript with the same text plays it (one agent call), another text drops it
(its agent stream closed) and is answered afresh. Events driven straight into the duplex."""

from __future__ import annotations

import asyncio

import numpy as np

from gateway.agent.echo import EchoAgent
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import Duplex
from gateway.listen.asr import Transcript
from gateway.listen.listener import FinalTranscript, Listener, TentativeTranscript
from gateway.listen.turns import SpeechStarted, SpeechStopped
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.tts.tone import ToneSynthesizer


class NoRecognizer:
    name = "none"

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        raise AssertionError("not used: the events are given")

    async def close(self) -> None:
        return None


class Quiet:
    name = "quiet"

    def probability(self, frame: np.ndarray) -> float:
        return 0.0

    def reset(self) -> None:
        return None


class CountingAgent(EchoAgent):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.closed: list[str] = []

    async def reply(self, text, history):
        self.calls.append(text)
        try:
            async for piece in super().reply(text, history):
                yield piece
        finally:
            self.closed.append(text)


def make(preempt: bool = True) -> tuple[Duplex, CountingAgent, FrameQueue, list[str]]:
    conversation = Conversation(EncoderSettings())
    queue = FrameQueue(500)
    conversation.attach_sink("rtp", queue, SinkPolicy.BLOCK)
    published: list[str] = []
    conversation.events.on_event(lambda e: published.append(e.type))
    agent = CountingAgent()
    listener = Listener(NoRecognizer(), vad=Quiet(), partials=False)
    duplex = Duplex(conversation, listener, agent, ToneSynthesizer(seconds=0.3),
                    preempt=preempt)
    return duplex, agent, queue, published


def final(text: str) -> FinalTranscript:
    transcript = Transcript(text, True, 1.0)
    stopped = SpeechStopped(at=1.0, detected_at=1.5, started_at=0.1, reason="silence",
                            audio=np.zeros(16_000, dtype=np.int16))
    return FinalTranscript(1, text, transcript, stopped, speculative=True)


async def start_turn(duplex: Duplex) -> None:
    duplex.listener.turn = 1
    duplex._on_event(SpeechStarted(0.1, 0.3))


async def test_the_reply_is_prepared_on_the_tentative_and_played_on_the_same_final():
    duplex, agent, queue, published = make()
    await start_turn(duplex)
    duplex._on_event(TentativeTranscript(1, "turn the lights off", Transcript("x", True, 1.0)))
    prepared = duplex._prepared
    assert prepared is not None and prepared.task is not None
    await prepared.task
    assert prepared.first == "You said:"  # the echo's first clause
    assert prepared.prerender is not None and prepared.prerender.task is not None
    await prepared.prerender.task  # rendered ...
    assert len(prepared.prerender.payloads) == 15
    assert queue.pop() is None and "reply" not in published  # ... but nothing said
    duplex._on_event(final("turn the lights off"))
    assert duplex._reply is not None
    await duplex._reply
    turn = duplex.turns[-1]
    assert turn.prepared and turn.reply and turn.utterances
    assert agent.calls == ["turn the lights off"]  # one agent call for both
    await duplex.conversation.speaker.idle.wait()  # every clause queued (the queue holds all)
    assert "reply" in published and queue.pop() is not None  # said now
    first = turn.utterances[0]
    assert first.frames_encoded == 15 and first.first_frame_queued_at is not None
    assert duplex.state()["replies_prepared_used"] == 1
    await duplex.close()
    await duplex.conversation.close()


async def test_a_final_with_another_text_drops_the_prepared_reply():
    duplex, agent, _queue, _published = make()
    await start_turn(duplex)
    duplex._on_event(TentativeTranscript(1, "turn the lights", Transcript("x", True, 1.0)))
    prepared = duplex._prepared
    assert prepared is not None and prepared.task is not None
    await prepared.task
    render = prepared.prerender
    duplex._on_event(final("turn the lights off"))  # the user went on
    assert duplex._reply is not None
    await duplex._reply
    turn = duplex.turns[-1]
    assert not turn.prepared and turn.utterances
    assert agent.calls == ["turn the lights", "turn the lights off"]
    await asyncio.gather(*duplex._discarding)  # cancelled, the agent stream closed
    assert "turn the lights" in agent.closed
    assert render is not None and render.done and render.payloads == []
    await duplex.close()
    await duplex.conversation.close()


async def test_without_preemption_nothing_is_prepared():
    duplex, agent, _queue, _published = make(preempt=False)
    await start_turn(duplex)
    duplex._on_event(TentativeTranscript(1, "hello", Transcript("x", True, 1.0)))
    assert duplex._prepared is None and agent.calls == []
    duplex._on_event(final("hello"))
    assert duplex._reply is not None
    await duplex._reply
    assert agent.calls == ["hello"] and not duplex.turns[-1].prepared
    await duplex.close()
    await duplex.conversation.close()
