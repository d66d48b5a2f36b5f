"""A conversation: what a session says, with no transport in it.

It owns the speaker (utterances -> encoded frames, made once) and the fan-out those frames leave
through. Legs attach to it as ``AudioSink``s (gateway.media.sink): a WebRTC leg's RTP stream is
a BLOCK sink (it plays the conversation: synthesis waits for it), an extra listener a DROP sink
(never slows the others). The duplex loop (gateway.conversation.duplex) listens back: it may
``pause`` the playout (a barge-in not yet confirmed) and ``resume`` it, or ``interrupt``.
``heard`` says how much of an utterance the listener has played and which words that was (the
one definition of heard: the first sink's played position, heard.py's words); an interrupted
utterance's event carries it. ``words`` (gateway.conversation.words) publishes a ``word`` event
for each word of a playing utterance when that position reaches it.
"""

from __future__ import annotations

import time

from gateway.conversation.events import EventBus
from gateway.conversation.heard import Heard, heard
from gateway.conversation.words import WordEvents
from gateway.media.fanout import FrameFanout, SinkPolicy, SinkPort
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.media.sink import AudioSink, played
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.speaker import Speaker
from gateway.speech.utterance import FINAL_STATES, Utterance, UtteranceState
from gateway.text.timing import WordTiming
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
        self._events = EventBus()
        self.speaker = Speaker(
            self.fanout, settings, max_pending_utterances, cache=phrase_cache, encode=encode
        )
        self.speaker.observer = self._on_utterance
        self._texts: dict[Utterance, str] = {}  # what each unfinished utterance says
        self._heard: dict[Utterance, Heard] = {}  # as heard when it was cut
        #: the furthest each unfinished utterance was played (``played_ms`` never goes back)
        self._played: dict[Utterance, float] = {}
        self.paused = False
        self.sinks: dict[str, AudioSink] = {}
        # words are computed only while the events have a listener that takes them
        self.words = WordEvents(self._publish_word, self.played_ms, wanted=self._wants_words)
        self._events.on_words_wanted = self.words.resume

    @property
    def events(self) -> EventBus:
        """The conversation's events. Settable (a channel puts its own bus here): the word
        events follow whichever bus it is, and are made only while it ``wants_words``."""
        return self._events

    @events.setter
    def events(self, bus: EventBus) -> None:
        self._events.on_words_wanted = None
        self._events = bus
        bus.on_words_wanted = self.words.resume
        if bus.wants_words:
            self.words.resume()

    def _wants_words(self) -> bool:
        return self._events.wants_words

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

    def played_ms(self, utterance: Utterance, now: float | None = None) -> float | None:
        """How far the first sink's listener has played ``utterance`` (ms), when that sink
        can tell (gateway.media.sink); ``None`` otherwise."""
        delivery = utterance.primary
        sink = None if delivery is None else self.sinks.get(delivery.sink)
        if delivery is None or sink is None:
            return None
        position = played(delivery, sink, time.monotonic() if now is None else now)
        if position is None:
            return None
        # What was heard is not un-heard: the listener's delay follows each RTT sample (a
        # receiver report read late reads long), so the position computed now can fall behind
        # one computed before -- the words already published as heard, or a cut after them.
        furthest = self._played.get(utterance, 0.0)
        if position.played_ms <= furthest:
            return furthest
        if utterance.state not in FINAL_STATES:
            self._played[utterance] = position.played_ms
        return position.played_ms

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
                was = self._heard[utterance] = heard(utterance, text, now,
                                                     self.played_ms(utterance, now))
                self.words.cut(utterance, was.ms)  # its heard words, before the cut lands
        cut = self.speaker.interrupt()
        self.resume()  # the queue is empty: the next reply plays at once
        return cut

    def heard(self, utterance: Utterance, text: str | None = None) -> Heard:
        """How much of ``utterance`` (saying ``text``: default, what it was said with) the
        listener heard -- as of its cut, if it was cut."""
        cached = self._heard.get(utterance)
        if cached is not None:
            return cached
        now = time.monotonic()
        said = self._texts.get(utterance, utterance.text) if text is None else text
        return heard(utterance, said, now, self.played_ms(utterance, now))

    def _on_utterance(self, utterance: Utterance, state: UtteranceState) -> None:
        self.events.publish("utterance", id=utterance.id, state=state.value)
        if state is UtteranceState.PLAYING:
            self.words.follow(utterance)
        elif state is UtteranceState.FAILED:
            self.words.drop(utterance)
        if state is UtteranceState.INTERRUPTED:
            was = self.heard(utterance)
            self.words.cut(utterance, was.ms)  # the words heard before the cut, no others
            self.events.publish("interrupted", utterance=utterance.id, heard_ms=was.ms,
                                heard_text=was.text)
        if state in FINAL_STATES:
            self._texts.pop(utterance, None)
            self._heard.pop(utterance, None)
            self._played.pop(utterance, None)

    def _publish_word(self, utterance: Utterance, word: WordTiming) -> None:
        self._events.publish("word", utterance=utterance.id, word=word.word,
                            start_ms=word.start_ms, end_ms=word.end_ms)

    async def close(self) -> None:
        self.words.close()
        self.sinks.clear()  # the legs (an HTTP leg holds its conversation: no cycle left)
        try:
            await self.speaker.close()
        finally:
            self.events.close()
