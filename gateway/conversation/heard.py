"""What the listener heard of an utterance: the one definition the barge-in and the agent's
history use (issue 26: the conversation keeps what was heard, not what was generated).

``heard_ms``: how far the primary sink's listener has played (``played_ms``: its
``AudioSink.listener_delay_s`` behind the sends, gateway.media.sink) when the caller knows it;
else the frames sent less what the client had not played yet -- ``PLAYOUT_ALLOWANCE_MS`` of the
last frames sent, shrinking as time passes after the last frame (a paused reply's last frames
are heard during the pause).
``heard_text``: the words of the utterance's text up to that share of its frames (by
characters: a clause is spoken at an even pace to within a word).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.media.sink import PLAYOUT_ALLOWANCE_MS
from gateway.speech.utterance import Utterance, UtteranceState

FRAME_MS = 20


@dataclass(frozen=True, slots=True)
class Heard:
    ms: int
    text: str
    complete: bool  # every frame was heard


def heard_ms(utterance: Utterance, now: float | None = None,
             allowance_ms: float = PLAYOUT_ALLOWANCE_MS, played_ms: float | None = None) -> int:
    if played_ms is not None:
        return round(played_ms)
    delivery = utterance.primary
    if delivery is None or not delivery.frames:
        return 0
    sent_ms = delivery.frames * FRAME_MS
    since = ((time.monotonic() if now is None else now) - (delivery.last_at or 0.0)) * 1000
    return max(0, round(sent_ms - max(0.0, allowance_ms - since)))


def heard_words(text: str, share: float) -> str:
    """The words of ``text`` whose end falls within the first ``share`` (0-1) of it."""
    if share >= 1.0:
        return text.strip()
    limit = share * len(text)
    words, position = [], 0
    for word in text.split():
        position = text.index(word, position) + len(word)
        if position > limit:
            break
        words.append(word)
    return " ".join(words)


def heard(utterance: Utterance, text: str, now: float | None = None,
          played_ms: float | None = None) -> Heard:
    """``utterance`` (whose text was ``text``) as heard so far (``played_ms``: the listener's
    played position, when its sink can tell)."""
    if utterance.state is UtteranceState.DONE:
        total = utterance.total_frames or 0
        return Heard(total * FRAME_MS, text.strip(), True)
    ms = heard_ms(utterance, now, played_ms=played_ms)
    # its length: known once synthesis has ended; until then, what the voice has produced
    total = utterance.total_frames or max(utterance.frames_rendered, utterance.frames_encoded,
                                          utterance.frames_sent)
    if not total:
        return Heard(0, "", False)
    share = min(1.0, ms / (total * FRAME_MS))
    return Heard(ms, heard_words(text, share), share >= 1.0)
