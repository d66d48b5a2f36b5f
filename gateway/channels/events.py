"""A channel's events: a session's event bus with room for a channel's many SSE listeners.

Event types: ``utterance`` ``{id, state}`` and ``interrupted`` (the conversation's), ``caption``
``{utterance, text}`` when an utterance starts to be heard (its first frame aired),
``word`` ``{utterance, word, start_ms, end_ms}`` as each word is heard (the conversation's
word events, on the channel's send clock with the playout allowance: channel.py ``AirSink``),
``listener_joined`` / ``listener_left`` ``{id, transport, listeners[, reason]}``, and
``channel_closed`` ``{reason}`` last. Each subscriber's queue is bounded (oldest dropped).
"""

from __future__ import annotations

from gateway.conversation.events import EventBus


class ChannelEvents(EventBus):
    MAX_SUBSCRIBERS = 1024
