"""Where an utterance's speech begins: the first few milliseconds loud enough to hear.

A neural voice's render starts with a murmur before the first phoneme: Piper's closure of an
initial stop ("Please": 30 ms at -45 to -48 dBFS before the burst), the tail of a soft
fricative's rise ("Thanks"). A sample threshold (``SILENCE_THRESHOLD``, one sample above 300)
keeps all of it, and it is what a listener gets first: with Opus's 6.5 ms of look-ahead in
front of it the first decoded 20 ms frame was under -45 dBFS for 3 of 10 sentences, so the
first frame heard came 20-40 ms after the first frame sent (docs/latency.md, "The onset").
The lead is cut where a short window first reaches ``ONSET_DBFS``, keeping ``ONSET_KEEP_S``
before it, faded in so the cut is not a step.
"""

from __future__ import annotations

import numpy as np

ONSET_DBFS = -40.0  # the RMS of a window that counts as speech having started
ONSET_WINDOW_S = 0.0025
ONSET_KEEP_S = 0.005  # kept before the onset window: the start of the phoneme's rise
ONSET_SEARCH_S = 0.5  # looked at from the first loud sample on: a bound, not a guess
FADE_IN_S = 0.0025


def speech_onset(pcm: np.ndarray, rate: int, since: int = 0) -> int | None:
    """The first sample of the first ``ONSET_WINDOW_S`` window (from ``since``, within
    ``ONSET_SEARCH_S``) whose RMS reaches ``ONSET_DBFS``; None if no window does."""
    window = max(1, int(rate * ONSET_WINDOW_S))
    span = pcm[since: since + int(rate * ONSET_SEARCH_S)]
    count = span.size // window
    if not count:
        return None
    blocks = span[: count * window].astype(np.float64).reshape(count, window)
    level = (10 ** (ONSET_DBFS / 20) * 32768) ** 2
    loud = np.flatnonzero(np.mean(blocks * blocks, axis=1) >= level)
    return None if not loud.size else since + int(loud[0]) * window


def lead_start(pcm: np.ndarray, rate: int, first_loud: int, keep_lead: float) -> int:
    """Where an utterance's kept audio starts: ``keep_lead`` before ``first_loud`` (the first
    sample over the silence threshold) or ``ONSET_KEEP_S`` before its speech onset, whichever
    is later: never more lead than the sample threshold kept."""
    onset = speech_onset(pcm, rate, max(0, first_loud - int(rate * ONSET_WINDOW_S)))
    start = first_loud - int(rate * keep_lead)
    if onset is not None:
        start = max(start, onset - int(rate * ONSET_KEEP_S))
    return max(0, start)


def fade_in(pcm: np.ndarray, rate: int) -> np.ndarray:
    """``pcm`` (int16) with its first ``FADE_IN_S`` raised from zero (a new array if changed)."""
    n = min(pcm.size, int(rate * FADE_IN_S))
    if n < 2:
        return pcm
    ramp = 0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, endpoint=False))
    out = pcm.copy()
    out[:n] = np.round(pcm[:n] * ramp).astype(np.int16)
    return out
