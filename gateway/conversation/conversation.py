"""A conversation: what a session says, with no transport in it.

It owns the speaker (utterances -> encoded frames, made once) and the fan-out those frames leave
through. Legs attach to it as ``AudioSink``s (gateway.media.sink): a WebRTC leg's RTP stream is
a BLOCK sink (it plays the conversation: synthesis waits for it), an extra listener a DROP sink
(never slows the others). ``heard`` says how much of an utterance the listener has played (the
one definition of heard). The duplex loop (gateway.conversation.duplex) listens back.
"""

from __future__ import annotations

import time

from gateway.conversation.events import EventBus
from gateway.media.fanout import FrameFanout, SinkPolicy, SinkPort
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.media.sink import AudioSink, Heard, heard
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.speaker import Speaker
from gateway.speech.utterance import Utterance, UtteranceState
from gateway.tts.base import Synthesizer


class Conversation:
    def __init__(
        self,
        settings: EncoderSettings,
        max_pending_utterances: int = 32,
        phrase_cache: PhraseCache | None = None,
        encode: bool = True,
    ) -> None:
        """``encode=False``: the frames are 24 kHz PCM, not Opus (see ``Speaker``)."""
        self.fanout = FrameFanout()
        self.events = EventBus()
        self.speaker = Speaker(
            self.fanout, settings, max_pending_utterances, cache=phrase_cache, encode=encode
        )
        self.speaker.observer = self._on_utterance
        self.sinks: dict[str, AudioSink] = {}

    def attach_sink(
        self, name: str, queue: FrameQueue, policy: SinkPolicy, sink: AudioSink | None = None
    ) -> SinkPort:
        port = self.fanout.attach(name, queue, policy)
        if sink is not None:
            self.sinks[name] = sink
        return port

    def detach_sink(self, name: str) -> None:
        self.fanout.detach(name)
        self.sinks.pop(name, None)

    def heard(self, utterance: Utterance, now: float | None = None) -> Heard | None:
        """How much of ``utterance`` its first sink's listener has played by ``now``
        (monotonic); ``None`` when nothing was sent yet or that sink cannot say."""
        delivery = utterance.primary
        if delivery is None:
            return None
        sink = self.sinks.get(delivery.sink)
        if sink is None:
            return None
        return heard(delivery, sink, time.monotonic() if now is None else now)

    def say(
        self,
        text: str,
        voice: Synthesizer,
        interrupt: bool = False,
        instructions: str | None = None,
        prerendered: Prerender | None = None,
    ) -> Utterance:
        return self.speaker.say(text, voice, interrupt=interrupt, instructions=instructions,
                                prerendered=prerendered)

    def interrupt(self) -> int:
        return self.speaker.interrupt()

    def _on_utterance(self, utterance: Utterance, state: UtteranceState) -> None:
        self.events.publish("utterance", id=utterance.id, state=state.value)
        if state is UtteranceState.INTERRUPTED:
            self.events.publish("interrupted", utterance=utterance.id)

    async def close(self) -> None:
        try:
            await self.speaker.close()
        finally:
            self.events.close()
