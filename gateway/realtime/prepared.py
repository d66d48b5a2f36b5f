"""A reply begun on a tentative transcript (the duplex loop's preemptive reply, for Realtime).

The listener's speculative final arrives while the turn's end is still awaited: with server
VAD and ``create_response``, the agent is asked at once and its first clause rendered
(``Speaker.prerender``), nothing said or sent. If the turn ends on that text, the response
starts from there (its first audio as soon as the turn is over); otherwise it is dropped (the
agent's stream closed, the rendering cancelled): an agent call and a synthesis wasted, never a
word early.
"""

from __future__ import annotations

from gateway.conversation.duplex import PreparedReply

__all__ = ["PreparedReply"]  # the duplex loop's own: one class for both doors
