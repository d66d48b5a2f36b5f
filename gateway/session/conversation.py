"""A conversation: what a session says (and, next, hears), with no transport in it.

It owns the speaker (utterances -> encoded frames, made once) and the fan-out those frames leave
through. Legs attach to it: a WebRTC leg's RTP stream is a BLOCK sink (it plays the
conversation: synthesis waits for it), an HTTP listener a DROP sink (never slows the others).
The full-duplex loop (VAD, ASR, the agent) joins here next, fed by a leg's uplink.
"""

from __future__ import annotations

from gateway.media.fanout import FrameFanout, SinkPolicy, SinkPort
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.session.events import EventBus
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

    def attach_sink(self, name: str, queue: FrameQueue, policy: SinkPolicy) -> SinkPort:
        return self.fanout.attach(name, queue, policy)

    def detach_sink(self, name: str) -> None:
        self.fanout.detach(name)

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
