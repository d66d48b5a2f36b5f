"""A turn ended too early, taken back: the user goes on within ``CONTINUE_MS`` of their last
word, over the reply to the first half (issue 26).

Any end-of-turn rule cuts some turns in a pause: "Turn the volume up [450 ms] a bit more,
please" -- the first half is a sentence of its own, and the turn model (P 0.96) and Whisper
("Turn the volume up.") agree with the listener who would have answered there too. What a person
does then is stop and hear the rest. So does the duplex loop: a turn whose speech starts within
``CONTINUE_MS`` of the previous turn's last voiced frame, while that turn's reply is still being
thought of or said, *continues* it. If it is then answered (the pause gate confirmed it as the
user's, conversation/paused_words.py: the reply's own echo or a cough does not continue
anything), the reply to the first half is cut and kept out of the history (nobody asked it:
the user was still talking), and the agent answers both halves as one turn. If it is not
answered (an echo, a "hm", an empty transcript) the first turn stands, its reply as heard.
"""

from __future__ import annotations

#: a new turn starting this soon after the previous one's last voiced frame may continue it (a
#: mid-sentence pause: the brief's set has 300-600 ms; Smart Turn's dangling cap is 1200)
CONTINUE_MS = 1000


def continues(previous_stopped_at: float | None, started_at: float,
              within_ms: int = CONTINUE_MS) -> bool:
    """A turn starting at ``started_at`` (monotonic) continues one whose last voiced frame was
    at ``previous_stopped_at``."""
    if within_ms <= 0 or previous_stopped_at is None:
        return False
    return 0.0 <= (started_at - previous_stopped_at) * 1000 <= within_ms


def joined(first: str, then: str) -> str:
    """Both halves' transcripts as one turn's text: Whisper ends the first with a full stop it
    heard no more than a pause in; a second half it wrote in lower case keeps going."""
    first, then = first.strip(), then.strip()
    if not first:
        return then
    if not then:
        return first
    if first.endswith(".") and not first.endswith("..") and then[0].islower():
        first = first[:-1]
    return f"{first} {then}"
