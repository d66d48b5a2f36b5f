"""A channel: one voice, its speaker's frames encoded once, aired to any number of listeners.

It owns a conversation (the speaker, the utterance states and events) whose fan-out has one
sink, the channel's ``Air`` (air.py), and the listeners the air feeds (WHEP and HTTP; SSE
subscribers read ``events``). ``close`` ends everything it started: the air's clock, every
listener (their peer connections and responses), the speaker and its synthesis, the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from typing import Any

from gateway.channels.air import Air
from gateway.channels.events import ChannelEvents
from gateway.channels.listener import DEFAULT_LAG, LagPolicy, Listener
from gateway.media.fanout import SinkPolicy
from gateway.media.opus_codec import EncoderSettings, silence_packet
from gateway.session.conversation import Conversation
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.utterance import FINAL_STATES, Utterance, UtteranceState
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)
AIR_SINK = "air"


class ChannelFull(Exception):
    pass


class ChannelClosed(Exception):
    pass


class Channel:
    def __init__(
        self,
        name: str,
        voice: Synthesizer,
        settings: EncoderSettings,
        max_listeners: int = 1000,
        lag: LagPolicy = DEFAULT_LAG,
        phrase_cache: PhraseCache | None = None,
        max_pending_utterances: int = 32,
        lead_frames: int = 10,
    ) -> None:
        self.name = name
        self.voice = voice
        self.max_listeners = max_listeners
        self.lag = lag
        self.created_at = time.monotonic()
        self.conversation = Conversation(settings, max_pending_utterances, phrase_cache)
        self.events = self.conversation.events = ChannelEvents()
        speaker = self.conversation.speaker
        inner = speaker.observer
        self._texts: dict[str, str] = {}  # utterances not yet heard: their captions
        self.frames_encoded = 0  # by the speaker, over the channel's utterances (once each)

        def observe(utterance: Utterance, state: UtteranceState) -> None:
            if inner is not None:
                inner(utterance, state)
            self._observe(utterance, state)

        speaker.observer = observe
        self.air = Air(silence_packet(settings), lead_frames)
        self.conversation.attach_sink(AIR_SINK, self.air.queue, SinkPolicy.BLOCK)
        self._listeners: dict[str, Listener] = {}
        self.joined_total = 0
        self.left_reasons: Counter[str] = Counter()
        self.close_reason: str | None = None
        self.closed = asyncio.Event()
        self.air.start()

    # --- speech ------------------------------------------------------------------------------

    def say(self, text: str, voice: Synthesizer | None = None, interrupt: bool = False,
            requested_at: float | None = None, prerendered: Prerender | None = None
            ) -> Utterance:
        """Raises SpeechQueueFull, ChannelClosed."""
        if self.close_reason is not None:
            raise ChannelClosed(f"channel {self.name!r} is closed")
        return self.conversation.speaker.say(text, voice or self.voice, interrupt=interrupt,
                                             requested_at=requested_at,
                                             prerendered=prerendered)

    def interrupt(self) -> int:
        return self.conversation.interrupt()

    def _observe(self, utterance: Utterance, state: UtteranceState) -> None:
        if state is UtteranceState.QUEUED:
            self._texts[utterance.id] = utterance.text
        elif state is UtteranceState.PLAYING:
            text = self._texts.pop(utterance.id, None)
            if text is not None:
                self.events.publish("caption", utterance=utterance.id, text=text)
        elif state in FINAL_STATES:
            self._texts.pop(utterance.id, None)
            self.frames_encoded += utterance.frames_encoded

    # --- listeners ---------------------------------------------------------------------------

    def join(self, listener: Listener) -> None:
        """From the next aired frame on. Raises ChannelFull, ChannelClosed."""
        if self.close_reason is not None:
            raise ChannelClosed(f"channel {self.name!r} is closed")
        if len(self._listeners) >= self.max_listeners:
            raise ChannelFull(f"channel {self.name!r} has its maximum of "
                              f"{self.max_listeners} listeners")
        listener.on_closed = self._left
        self._listeners[listener.id] = listener
        self.air.add(listener)
        self.joined_total += 1
        self.events.publish("listener_joined", id=listener.id, transport=listener.transport,
                            listeners=len(self._listeners))

    def _left(self, listener: Listener) -> None:
        self.air.remove(listener)
        if self._listeners.pop(listener.id, None) is None:
            return
        reason = listener.close_reason or "closed"
        self.left_reasons[reason.split(":", 1)[0]] += 1
        self.events.publish("listener_left", id=listener.id, transport=listener.transport,
                            reason=reason, listeners=len(self._listeners))

    def listener(self, listener_id: str) -> Listener | None:
        return self._listeners.get(listener_id)

    @property
    def listeners(self) -> list[Listener]:
        return list(self._listeners.values())

    def count_by_transport(self) -> dict[str, int]:
        counts: dict[str, int] = {"whep": 0, "http": 0}
        for listener in self._listeners.values():
            counts[listener.transport] = counts.get(listener.transport, 0) + 1
        return counts

    # --- lifetime ----------------------------------------------------------------------------

    async def close(self, reason: str = "deleted") -> None:
        if self.close_reason is not None:
            await self.closed.wait()
            return
        self.close_reason = reason
        log.info("channel %s closing: %s", self.name, reason)
        try:
            self.air.stop()
            listeners = list(self._listeners.values())
            results = await asyncio.gather(
                *(listener.close(f"channel closed: {reason}") for listener in listeners),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    log.error("channel %s: a listener's close failed: %r", self.name, result)
            with contextlib.suppress(Exception):
                self.conversation.detach_sink(AIR_SINK)
            self.conversation.interrupt()
            await asyncio.sleep(0)  # state changes are told on the next loop pass: theirs first
            self.events.publish("channel_closed", reason=reason)
            await self.conversation.close()  # cancels synthesis; closes the events
        finally:
            self.closed.set()

    def state(self, listeners: int = 100) -> dict[str, Any]:
        speaker = self.conversation.speaker
        current = speaker.current
        stats = self.air.stats
        return {
            "name": self.name,
            "voice": self.voice.name,
            "age_s": round(time.monotonic() - self.created_at, 3),
            "max_listeners": self.max_listeners,
            "listeners": self.count_by_transport(),
            "event_subscribers": self.events.subscribers,
            "listeners_joined_total": self.joined_total,
            "listeners_left": dict(self.left_reasons),
            "playing": None if current is None else current.as_json(),
            "utterances": {"pending": speaker.pending, **speaker.counts,
                           "recent": [u.as_json() for u in list(speaker.recent)[-10:]]},
            "encoder": {"utterances_encoded": speaker.encoders_created,
                        "frames_encoded": self.frames_encoded + (
                            current.frames_encoded if current is not None else 0)},
            "air": {"frames_sent": stats.speech_frames, "silence_frames": stats.silence_frames,
                    "ticks": stats.ticks, "deliveries": stats.deliveries,
                    "decoded": stats.decoded, "rebases": stats.rebases,
                    "max_late_ms": stats.max_late_ms, "queued": len(self.air.queue)},
            "listener_list": [listener.state() for listener in self.listeners[:listeners]],
        }
