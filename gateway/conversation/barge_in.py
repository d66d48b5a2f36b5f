"""Barge-in that pauses first (issue 26): talking over a reply pauses its audio at once; the
reply is cut only once the barge-in is confirmed, and resumes where it paused if it is not.

``PauseGate`` (pure, stream time): while a reply is audible, the ``pause_ms`` of voiced frames
of a start pause it (at most once per start: the onset frame is the key). It resumes when the
voice is gone before confirmation (the start was dropped, or the turn ended short of the
barge-in minimum: a cough, a "hm", the reply's own echo -- which stops with the pause) or after
``max_pause_ms`` unconfirmed. Confirmation is the duplex loop's: the barge-in minimum of voiced
speech (``BargeIn``) or words heard (``words_heard`` on a transcript of the overlapping turn).

``words_heard``: a transcript counts when it holds a word that is neither a filler nor one of
the reply's own words (an echo transcribes as the reply).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

FILLERS = frozenset("""
hm hmm hmmm mm mmm mhm mm-hmm uh-huh uh um uhm er erm ah oh huh
""".split())
_PUNCT = ".,!?;:\"'()[]-\u2026"

GateAction = Literal["pause", "resume"]


def _words(text: str) -> list[str]:
    return [w for w in (t.strip(_PUNCT).lower() for t in text.split()) if w]


def words_heard(text: str, reply_text: str = "") -> bool:
    reply = set(_words(reply_text))
    return any(w not in FILLERS and w not in reply for w in _words(text))


@dataclass
class PauseGate:
    pause_ms: float = 100.0
    max_pause_ms: float = 1500.0
    paused_at: float | None = None  # stream seconds
    _onset: int | None = field(default=None, repr=False)  # the start that paused (or was let be)
    pauses: int = 0
    resumes: int = 0

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def on_frame(self, *, audible: bool, listening: bool, voiced_ms: float, onset: int | None,
                 now: float) -> GateAction | None:
        """After each 20 ms frame heard: what to do with the reply's playout."""
        if self.paused_at is not None:
            if not listening or not audible or now - self.paused_at >= self.max_pause_ms / 1000:
                self.paused_at = None
                self.resumes += 1
                return "resume"
            return None
        if audible and listening and voiced_ms >= self.pause_ms and onset != self._onset:
            self._onset = onset
            self.paused_at = now
            self.pauses += 1
            return "pause"
        return None

    def confirmed(self) -> None:
        """The barge-in was confirmed and the reply cut: nothing left to resume."""
        self.paused_at = None
