"""A Realtime client that stops reading holds back synthesis, not memory: the engine's outbox
stops at its bound, the speaker's sink fills and the utterance waits; reading again lets it
finish. Real parts in one process (the speaker, a 30 s tone voice, the echo agent); the
pacing lead set past the reply so only backpressure holds the audio back."""

from __future__ import annotations

import asyncio
import json

from gateway.agent.echo import EchoAgent
from gateway.conversation.conversation import Conversation
from gateway.media.opus_codec import EncoderSettings
from gateway.realtime.config import SessionConfig
from gateway.realtime.engine import RealtimeEngine
from gateway.realtime.outbox import Outbox
from gateway.realtime.response import Hearing
from gateway.tts.tone import ToneSynthesizer


async def test_a_reader_that_stops_holds_back_synthesis():
    voice = ToneSynthesizer(name="long", frequency=330.0, seconds=8.0, sample_rate=24_000)
    conversation = Conversation(EncoderSettings(), encode=False)
    config = SessionConfig(model="m")
    config.update({"audio": {"input": {"turn_detection": None}}})
    outbox = Outbox(soft=8, hard=1000)
    engine = RealtimeEngine("s", conversation, Hearing(recognizer=None, agent=EchoAgent()),
                            lambda name: voice, config, outbox)
    engine.deltas.lead_s = 3600.0  # no pacing: as fast as the reader takes it
    engine.start()
    try:
        await engine.handle_text(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "go"}]}}))
        await engine.handle_text(json.dumps({"type": "response.create"}))
        await asyncio.sleep(1.0)  # nobody reads
        queued = len(outbox)
        assert queued <= 8 + 16  # the bound, and the few control events that never wait
        assert len(engine.deltas.sink) == engine.deltas.sink.maxsize  # the speaker's sink is full
        utterance = conversation.speaker.current
        assert utterance is not None and utterance.state.value != "done"  # synthesis waits
        kinds = []
        while "response.done" not in kinds:  # read again: it all comes, and finishes
            kinds.append(json.loads(await asyncio.wait_for(outbox.get(), 10))["type"])
        deltas = kinds.count("response.output_audio.delta")
        assert deltas >= 2 * 8 * 10  # two 8 s clauses, 100 ms per delta
        assert outbox.high_water <= 8 + 16
    finally:
        await engine.close()
        await conversation.close()
