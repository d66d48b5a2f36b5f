"""A conversation: what a session says (and, next, hears), with no transport in it.

It owns the speaker (utterances -> encoded frames, made once) and the fan-out those frames leave
through. Legs attach to it: a WebRTC leg's RTP stream is a BLOCK sink (it plays the
conversation: synthesis waits for it), an HTTP listener a DROP sink (never slows the others).
The full-duplex loop (VAD, ASR, the agent) joins here, fed by a leg's uplink: it may ``pause``
the playout (a barge-in not yet confirmed) and ``resume`` it, or ``interrupt``; an interrupted
utterance's event says how much of it was heard (session/heard.py).
"""

from __future__ import annotations

import time

from gateway.media.fanout import FrameFanout, SinkPolicy, SinkPort
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.session.events import EventBus
from gateway.session.heard import Heard, heard
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.speaker import Speaker
from gateway.speech.utterance import FINAL_STATES, Utterance, UtteranceState
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
        self._texts: dict[Utterance, str] = {}  # what each unfinished utterance says
        self._heard: dict[Utterance, Heard] = {}  # as heard when it was cut
        self.paused = False

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
        utterance = self.speaker.say(text, voice, interrupt=interrupt,
                                     instructions=instructions, prerendered=prerendered)
        if utterance.state not in FINAL_STATES:
            self._texts[utterance] = text
        return utterance

    def pause(self) -> None:
        """Hold the playout where it is (frames kept; the stream sends silence)."""
        self.paused = True
        self.fanout.hold(True)

    def resume(self) -> None:
        self.paused = False
        self.fanout.hold(False)

    def interrupt(self) -> int:
        now = time.monotonic()
        for utterance, text in self._texts.items():
            if utterance.state not in FINAL_STATES:
                self._heard[utterance] = heard(utterance, text, now)
        cut = self.speaker.interrupt()
        self.resume()  # the queue is empty: the next reply plays at once
        return cut

    def heard(self, utterance: Utterance, text: str | None = None) -> Heard:
        """How much of ``utterance`` (saying ``text``: default, what it was said with, known
        until it has finished) the listener heard -- as of its cut, if it was cut."""
        cached = self._heard.get(utterance)
        if cached is not None:
            return cached
        return heard(utterance, self._texts.get(utterance, "") if text is None else text)

    def _on_utterance(self, utterance: Utterance, state: UtteranceState) -> None:
        self.events.publish("utterance", id=utterance.id, state=state.value)
        if state is UtteranceState.INTERRUPTED:
            was = self.heard(utterance)
            self.events.publish("interrupted", utterance=utterance.id, heard_ms=was.ms,
                                heard_text=was.text)
        if state in FINAL_STATES:
            self._texts.pop(utterance, None)
            self._heard.pop(utterance, None)

    async def close(self) -> None:
        try:
            await self.speaker.close()
        finally:
            self.events.close()
