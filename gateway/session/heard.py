"""What the listener heard of an utterance: the one definition the barge-in and the agent's
history use (issue 26: the conversation keeps what was heard, not what was generated).

``heard_ms``: the primary sink's frames sent (the WebRTC leg's RTP stream), less what the
client had not played yet -- ``PLAYOUT_ALLOWANCE_MS`` of the last frames sent (its jitter buffer
and decoder), shrinking as time passes after the last frame (a paused reply's last frames are
heard during the pause). No sink reports a played position today: this is an estimate, kept in
this one function so a real one (RTCP, a client report) can replace it.
``heard_text``: the words of the utterance's text up to that share of its frames (by
characters: a clause is spoken at an even pace to within a word).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from gateway.speech.utterance import Utterance, UtteranceState

FRAME_MS = 20
PLAYOUT_ALLOWANCE_MS = 60


@dataclass(frozen=True, slots=True)
class Heard:
    ms: int
    text: str
    complete: bool  # every frame was heard


def heard_ms(utterance: Utterance, now: float | None = None,
             allowance_ms: float = PLAYOUT_ALLOWANCE_MS) -> int:
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


def heard(utterance: Utterance, text: str, now: float | None = None) -> Heard:
    """``utterance`` (whose text was ``text``) as heard so far."""
    if utterance.state is UtteranceState.DONE:
        total = utterance.total_frames or 0
        return Heard(total * FRAME_MS, text.strip(), True)
    ms = heard_ms(utterance, now)
    # its length: known once synthesis has ended; until then, what the voice has produced
    total = utterance.total_frames or max(utterance.frames_rendered, utterance.frames_encoded,
                                          utterance.frames_sent)
    if not total:
        return Heard(0, "", False)
    share = min(1.0, ms / (total * FRAME_MS))
    return Heard(ms, heard_words(text, share), share >= 1.0)
