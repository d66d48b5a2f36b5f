"""Word timings: when each word of a clause plays, on the audio's own timeline.

``WordTiming`` is the one record every path carries (the synthesizers put it on their PCM
chunks, the front doors turn it into ElevenLabs' per-character alignment, SSE ``word`` events
and framed-stream records). Times are milliseconds from the first sample of the audio that
carries the record; a word may run past that audio's end (into the next chunk).

Where the synthesizer knows (Piper's phoneme durations: ``gateway.tts.piper_align``) the times
are its own; otherwise ``interpolate_words`` estimates them at a constant character rate over
the clause's audible span (CosyVoice). The error of the estimate against Piper's own timings is
measured by ``bench/word_timing.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

SILENCE_THRESHOLD = 300  # int16 amplitude below which speech counts as silence
_PAUSE_CHARS = ",;:.!?\u2014\u2013\u2026"  # a pause follows: it takes time of its own
PAUSE_WEIGHT = 3.0  # characters' worth of time a punctuation pause takes in the estimate


@dataclass(frozen=True, slots=True)
class WordTiming:
    """One word as written in the text, and when it plays (ms from the audio's first sample).

    ``estimated`` is True when the times come from character-rate interpolation rather than
    from the synthesizer itself."""

    word: str
    start_ms: float
    end_ms: float
    estimated: bool = False

    def shifted(self, ms: float) -> WordTiming:
        return replace(self, start_ms=self.start_ms + ms, end_ms=self.end_ms + ms)


def audible_span(pcm: np.ndarray, rate: int, threshold: int = SILENCE_THRESHOLD
                 ) -> tuple[float, float]:
    """(first, last) audible instant of int16 ``pcm``, in ms; (0, 0) if it is all silence."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > threshold)
    if not loud.size:
        return 0.0, 0.0
    return float(loud[0]) * 1000 / rate, float(loud[-1] + 1) * 1000 / rate


def interpolate_words(text: str, start_ms: float, end_ms: float) -> list[WordTiming]:
    """The words of ``text`` spread over [start_ms, end_ms] at a constant character rate
    (a punctuation pause counts ``PAUSE_WEIGHT`` characters, spent after its word)."""
    words = text.split()
    if not words or end_ms <= start_ms:
        return [WordTiming(w, start_ms, start_ms, True) for w in words]
    spoken = [float(len(w.rstrip(_PAUSE_CHARS)) or len(w)) for w in words]
    pauses = [PAUSE_WEIGHT if w[-1] in _PAUSE_CHARS and i + 1 < len(words) else 0.0
              for i, w in enumerate(words)]
    gaps = 1.0  # a space's worth between words
    total = sum(spoken) + sum(pauses) + gaps * (len(words) - 1)
    per_char = (end_ms - start_ms) / total
    out: list[WordTiming] = []
    t = start_ms
    for i, word in enumerate(words):
        end = t + spoken[i] * per_char
        out.append(WordTiming(word, round(t, 1), round(end, 1), True))
        t = end + (pauses[i] + gaps) * per_char
    return out


def estimate_words(text: str, pcm: np.ndarray, rate: int) -> list[WordTiming]:
    """Character-rate estimate of ``text``'s words over the audible part of ``pcm``."""
    start, end = audible_span(pcm, rate)
    if end <= start:
        start, end = 0.0, pcm.size * 1000 / rate
    return interpolate_words(text, start, end)


class WordTrack:
    """One utterance's words on its own timeline (ms from its first sample), built as its PCM
    streams: each chunk's words shifted by the audio before the chunk; for a backend that times
    none, the whole text estimated over the utterance's audible span when it ends."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.words: list[WordTiming] = []
        self._at_ms = 0.0
        self._loud: tuple[float, float] | None = None

    def add(self, pcm: np.ndarray, rate: int, words: tuple[WordTiming, ...] = ()) -> None:
        self.words.extend(w.shifted(self._at_ms) for w in words)
        if not self.words and pcm.size:
            start, end = audible_span(pcm, rate)
            if end > start:
                first = self._loud[0] if self._loud else self._at_ms + start
                self._loud = (first, self._at_ms + end)
        self._at_ms += pcm.size * 1000 / rate

    def finish(self) -> list[WordTiming]:
        if not self.words and self._loud is not None:
            self.words = interpolate_words(self.text, *self._loud)
        return self.words
