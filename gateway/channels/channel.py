"""A channel: one voice, its speaker's frames encoded once, aired to any number of listeners.

It owns a conversation (the speaker, the utterance states and events) whose fan-out has one
sink, the channel's ``Air`` (air.py), and the listeners the air feeds (WHEP and HTTP, and the
links of mirrors on other workers; SSE subscribers read ``events``). ``close`` ends everything
it started: the air's clock, every listener (their peer connections and responses), the speaker
and its synthesis, the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from gateway.channels.air import Air
from gateway.channels.broadcast import Broadcast, ChannelClosed, ChannelFull
from gateway.channels.events import ChannelEvents
from gateway.channels.listener import DEFAULT_LAG, LagPolicy
from gateway.conversation.conversation import Conversation
from gateway.media.fanout import SinkPolicy
from gateway.media.opus_codec import EncoderSettings, silence_packet
from gateway.media.sink import DEFAULT_PLAYOUT_ALLOWANCE_S
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.utterance import FINAL_STATES, Utterance, UtteranceState
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)
AIR_SINK = "air"

__all__ = ["Channel", "ChannelClosed", "ChannelFull"]


class AirSink:
    """The air as the conversation's sink: "heard" follows the channel's send clock (frames
    aired) plus the WebRTC playout allowance, so the conversation's ``word`` events go out as
    a listener hears each word (one clock for every listener: each hears the air at its own
    small offset; a mirror holds them until it has aired the frames too: mirror.py)."""

    name = AIR_SINK

    def listener_delay_s(self) -> float:
        return DEFAULT_PLAYOUT_ALLOWANCE_S

    def record_sent(self) -> None:
        """(The air records each frame as it goes.)"""


class Channel(Broadcast):
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
        conversation = Conversation(settings, max_pending_utterances, phrase_cache)
        events = conversation.events = ChannelEvents()
        super().__init__(name, Air(silence_packet(settings), lead_frames), events,
                         max_listeners, lag)
        self.voice = voice
        self.conversation = conversation
        speaker = conversation.speaker
        inner = speaker.observer
        self._texts: dict[str, str] = {}  # utterances not yet heard: their captions
        self.frames_encoded = 0  # by the speaker, over the channel's utterances (once each)

        def observe(utterance: Utterance, state: UtteranceState) -> None:
            if inner is not None:
                inner(utterance, state)
            self._observe(utterance, state)

        speaker.observer = observe
        conversation.attach_sink(AIR_SINK, self.air.queue, SinkPolicy.BLOCK, AirSink())
        self.air.start()

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

    @property
    def encoded_frames(self) -> int:
        current = self.conversation.speaker.current
        return self.frames_encoded + (current.frames_encoded if current is not None else 0)

    async def close(self, reason: str = "deleted") -> None:
        if self.close_reason is not None:
            await self.closed.wait()
            return
        self.close_reason = reason
        log.info("channel %s closing: %s", self.name, reason)
        try:
            await self._close_listeners(reason)
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
        return {
            **self.listeners_state(listeners),
            "voice": self.voice.name,
            "playing": None if current is None else current.as_json(),
            "utterances": {"pending": speaker.pending, **speaker.counts,
                           "recent": [u.as_json() for u in list(speaker.recent)[-10:]]},
            "encoder": {"utterances_encoded": speaker.encoders_created,
                        "frames_encoded": self.encoded_frames},
        }
