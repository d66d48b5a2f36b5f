"""The typed interface every leg offers the conversation, and the one definition of *heard*.

A leg (the WebRTC leg, an HTTP stream, a channel listener) attaches to a conversation's fan-out
with a bounded queue and a policy, and tells the conversation how far behind its sends the
listener plays (``listener_delay_s``). From that and a delivery's send times, ``played_ms`` says
how much of an utterance the listener has *played* -- what barge-in truncation, word events and
"what was heard" in the agent's history all use (gateway.conversation.heard maps it to words),
so they agree.

- WebRTC: frames are paced in real time; a frame is heard RTT/2 (from RTCP) plus the receiver's
  playout delay after it is sent. RTCP carries no playout delay, so that is an allowance
  (``DEFAULT_PLAYOUT_ALLOWANCE_S``, near Chromium's jitter-buffer target on a clean path),
  unless the client reports its own position.
- HTTP ``live``: frames are written ``lead`` ahead of real time; the listener's buffer is the
  lead, so a frame is heard ``lead`` after it is written.
- HTTP ``asap``: unknown (``None``); nothing claims what such a listener heard.

Modelled on LiveKit Agents' ``voice/io.py`` ``AudioOutput`` (frames in, flush, clear, played
position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

FRAME_S = 0.020
DEFAULT_PLAYOUT_ALLOWANCE_S = 0.060
PLAYOUT_ALLOWANCE_MS = DEFAULT_PLAYOUT_ALLOWANCE_S * 1000


class SentFrames(Protocol):
    """What a sink records of an utterance's frames as it sends them (``speech.Delivery``)."""

    @property
    def frames(self) -> int: ...

    @property
    def first_at(self) -> float | None: ...

    @property
    def last_at(self) -> float | None: ...


class AudioSink(Protocol):
    """A listener's leg, as the conversation sees it."""

    name: str

    def listener_delay_s(self) -> float | None:
        """Seconds from a frame's send to its playout at the listener; ``None``: unknown."""
        ...

    def record_sent(self) -> None:
        """Bring what its deliveries record of their sends up to date, for a reader of their
        progress: a WebRTC stream sent from C records the frames C sent once a run of them
        (webrtc/fed_frames.py), so its owners' ``frames`` / ``last_at`` lag until then."""
        ...


@dataclass(frozen=True, slots=True)
class Played:
    """How much of an utterance one listener has played, at one moment."""

    played_ms: float
    sent_ms: float
    exact: bool  # True when the listener reported it; False: estimated from the delay


def played_ms(sent: SentFrames, delay_s: float, now: float) -> float:
    """Milliseconds of ``sent``'s audio played by ``now`` at a listener ``delay_s`` behind the
    sends: frames play back to back from the first one's send (+ delay), and none plays before
    it was sent (+ delay) -- a paused send (an underrun) holds the playout back."""
    first, last = sent.first_at, sent.last_at
    if first is None or last is None or sent.frames <= 0:
        return 0.0
    t = now - delay_s
    if t <= first:
        return 0.0
    by_clock = t - first
    # frames sent by t: they leave FRAME_S apart when paced, so the ones after t are the last
    # (last - t) / FRAME_S of them
    by_sends = sent.frames * FRAME_S - max(0.0, last - t)
    return max(0.0, min(by_clock, by_sends, sent.frames * FRAME_S)) * 1000.0


def played(sent: SentFrames, sink: AudioSink, now: float) -> Played | None:
    """``sent``'s played position at ``sink``'s listener, or ``None`` where it is unknown."""
    sink.record_sent()  # (the frames already sent count: word events, a cut, what was heard)
    delay = sink.listener_delay_s()
    if delay is None:
        return None
    return Played(played_ms(sent, delay, now), sent.frames * FRAME_S * 1000.0, exact=False)
