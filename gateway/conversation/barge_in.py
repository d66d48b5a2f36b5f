"""Barge-in that pauses first (issue 26): talking over a reply pauses its audio at once; the
reply is cut only once the barge-in is confirmed, and resumes where it paused if it is not.

``PauseGate`` (pure, stream time, fed every 20 ms frame heard): while a reply is audible, a
burst of ``pause_ms`` of voiced frames (gaps up to ``GAP_MS`` bridged) pauses it. The pause is
also the echo test: the reply's own echo stops with the reply, the user does not. After a
``grace_ms`` for the echo's tail (the echo path, the VAD's window), ``confirm_ms`` of voice
while paused confirms the barge-in (the duplex loop cuts the reply); ``resume_ms`` without
voice resumes it (a cough, a "hm", the echo), and so does ``max_pause_ms`` unconfirmed (a
pending words decode, ``checking``, holds the quiet resume until it is back). An
unconfirmed pause on a quiet burst (its loudest frame at most ``LEARN_CAP_DBFS``: the reply's
echo, not a cough) teaches the gate the echo's level -- from then on a burst counts only frames
``ECHO_MARGIN_DB`` louder. The first such lesson of a reply only teaches the level: the level
alone keeps the echo out, and a gate that also backed off would make the user's real barge-in
later in the same reply wait twice the burst. A second echo pause in the same reply (the level
learnt too low) doubles the burst the next pause needs (up to ``MAX_BACKOFF``, until the reply
ends), so an echo with no canceller costs a few short pauses per reply, not one per word
(``backoff_on_first_lesson``: back off on the first lesson too, as before 2026-12-02). Words
heard while paused confirm too (conversation/paused_words.py: the stretch after the grace,
decoded on its own): with no canceller the overlapping turn's own transcript holds the reply's
echo, which Whisper sometimes mishears as other words ("the one other end" for "The weather in
London"), so only the words of the paused stretch, where the echo is gone, are the user's.

``words_heard``: a transcript counts when at least half its words are neither fillers nor the
reply's own words (an echo transcribes as the reply, give or take Whisper's mistakes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FILLERS = frozenset("""
hm hmm hmmm mm mmm mhm mm-hmm uh-huh uh um uhm er erm ah oh huh
""".split())
_PUNCT = ".,!?;:\"'()[]-\u2026"
GAP_MS = 60.0
MAX_BACKOFF = 4
ECHO_MARGIN_DB = 6.0
LEARN_CAP_DBFS = -30.0

GateAction = Literal["pause", "resume", "cut"]


def _words(text: str) -> list[str]:
    return [w for w in (t.strip(_PUNCT).lower() for t in text.split()) if w]


def words_heard(text: str, reply_text: str = "") -> bool:
    """At least half the transcript's words are the user's own: neither fillers nor the
    reply's words (an echo, even one Whisper got partly wrong, is mostly the reply's)."""
    reply = set(_words(reply_text))
    stems = {w[:4] for w in reply if len(w) >= 4}
    words = [w for w in _words(text) if w not in FILLERS]
    novel = sum(not _echoed(w, reply, stems) for w in words)
    return novel > 0 and novel * 2 >= len(words)


def _echoed(word: str, reply: set[str], stems: set[str]) -> bool:
    """``word`` may be Whisper's rendering of one of the reply's words: the same, a number
    (Whisper writes "ten" as "10"), or the same first four letters ("favorite")."""
    return word in reply or word.isdigit() or (len(word) >= 4 and word[:4] in stems)


@dataclass
class PauseGate:
    pause_ms: float = 100.0
    grace_ms: float = 100.0
    confirm_ms: float = 600.0
    resume_ms: float = 240.0
    max_pause_ms: float = 1500.0
    frame_ms: float = 20.0
    #: also back off on a reply's first echo lesson (the rule before 2026-12-02)
    backoff_on_first_lesson: bool = False
    #: a decode of the words heard while paused is in flight: a quiet pause waits for it
    #: (conversation/paused_words.py) rather than resume over a short "Stop."
    checking: bool = False
    paused_at: float | None = None  # stream seconds
    pauses: int = 0
    resumes: int = 0
    confirmations: int = 0

    def __post_init__(self) -> None:
        self._burst = 0.0  # voiced ms in the current burst (not paused)
        self._gap = 0.0  # unvoiced ms since its last voiced frame
        self._heard = 0.0  # voiced ms while paused, after the grace
        self._quiet = 0.0  # unvoiced ms in a row while paused, after the grace
        self._backoff = 1
        self._lessons = 0  # echo levels learnt during this reply
        #: stream seconds of the current burst's first voiced frame (the onset it pauses on)
        self.burst_from: float | None = None
        self.echo_dbfs = float("-inf")  # frames this loud or quieter may be the reply's echo
        #: the last resume ended a pause on a burst quiet enough to be the echo (its voice
        #: while paused was the echo's tail, not the user)
        self.resumed_on_echo = False
        self._burst_peak = float("-inf")

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def voiced_while_paused_ms(self) -> float:
        """Voice heard during the current pause after its grace (0 when not paused): the
        reply's echo stops with the pause, so this is someone else's."""
        return self._heard if self.paused_at is not None else 0.0

    @property
    def burst_peak_dbfs(self) -> float:
        """The loudest frame of the burst that paused (or is about to pause) the reply."""
        return self._burst_peak

    @property
    def needed_ms(self) -> float:
        """The burst that pauses the reply now (backed off after unconfirmed pauses)."""
        return self.pause_ms * self._backoff

    def on_frame(self, *, audible: bool, voiced: bool, now: float,
                 level_dbfs: float = 0.0) -> GateAction | None:
        """After each frame heard (``level_dbfs``: its RMS): what to do with the playout."""
        if not audible:
            self._backoff, self._lessons = 1, 0  # the next reply starts afresh
        if self.paused_at is not None:
            if not audible:
                return self._resume()
            if (now - self.paused_at) * 1000 < self.grace_ms - 1e-6:
                return None
            if voiced:
                self._heard += self.frame_ms
                self._quiet = 0.0
                if self._heard >= self.confirm_ms - 1e-6:
                    self.confirmed()
                    return "cut"
            else:
                self._quiet += self.frame_ms
                if self._quiet >= self.resume_ms - 1e-6 and not self.checking:
                    return self._resume()
            if (now - self.paused_at) * 1000 >= self.max_pause_ms:
                return self._resume()
            return None
        if voiced and level_dbfs >= self.echo_dbfs + ECHO_MARGIN_DB:
            if not self._burst:
                self.burst_from = now - self.frame_ms / 1000
                self._burst_peak = level_dbfs
            self._burst += self.frame_ms
            self._burst_peak = max(self._burst_peak, level_dbfs)
            self._gap = 0.0
        else:
            self._gap += self.frame_ms
            if self._gap > GAP_MS:
                self._burst = 0.0
        if audible and self._burst >= self.needed_ms - 1e-6:
            self.paused_at = now
            self._heard = self._quiet = 0.0
            self.pauses += 1
            return "pause"
        return None

    def check_done(self) -> GateAction | None:
        """The words decode came back without confirming: resume now if the pause has been
        quiet long enough meanwhile."""
        self.checking = False
        if self.paused_at is not None and self._quiet >= self.resume_ms - 1e-6:
            return self._resume()
        return None

    def _resume(self) -> GateAction:
        self.resumed_on_echo = self._burst_peak <= LEARN_CAP_DBFS
        if self.resumed_on_echo:  # quiet enough to be the echo
            self.echo_dbfs = max(self.echo_dbfs, self._burst_peak)
            if self._lessons or self.backoff_on_first_lesson:
                self._backoff = min(MAX_BACKOFF, self._backoff * 2)
            self._lessons += 1
        self.paused_at = None
        self._burst = self._gap = 0.0
        self.resumes += 1
        return "resume"

    def confirmed(self) -> None:
        """The barge-in was confirmed and the reply cut: nothing left to resume."""
        self.paused_at = None
        self.checking = False
        self._burst = self._gap = 0.0
        self._backoff = 1
        self.confirmations += 1
