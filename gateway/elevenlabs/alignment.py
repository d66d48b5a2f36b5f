"""Word timings -> ElevenLabs' per-character alignment of one audio message.

ElevenLabs times every character of the input (spaces too) against the audio of the message
that carries it, restarting at 0 in each message: ``{"chars": [...], "charStartTimesMs": [...],
"charDurationsMs": [...]}`` (integers, ms). The clients rebuild words from it: Pipecat's
``calculate_word_times`` ends a word at a space and advances its clock by the last character's
end; LiveKit's ``_to_timed_words`` likewise. So each word's characters share the word's span
evenly, and every word is followed by a space spanning the gap to the next word (the last one's
to the end of the message's audio): the words of a message are complete within it and the
clients' clocks advance by exactly the audio's duration.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from gateway.text.timing import WordTiming


def char_alignment(words: Sequence[WordTiming], audio_ms: float) -> dict[str, Any]:
    chars: list[str] = []
    bounds: list[float] = []  # each character's start; the last entry is the end
    for w in words:
        start = min(max(w.start_ms, bounds[-1] if bounds else 0.0), audio_ms)
        end = min(max(w.end_ms, start), audio_ms)
        step = (end - start) / max(1, len(w.word))
        for k, ch in enumerate(w.word):
            chars.append(ch)
            bounds.append(start + k * step)
        chars.append(" ")  # until the next word starts (the last: until the audio ends)
        bounds.append(end)
    bounds.append(audio_ms)
    if not chars:
        return {"chars": [], "charStartTimesMs": [], "charDurationsMs": []}
    ints = [round(b) for b in bounds]
    for k in range(1, len(ints)):  # rounding never makes time run backwards
        ints[k] = max(ints[k], ints[k - 1])
    return {
        "chars": chars,
        "charStartTimesMs": ints[:-1],
        "charDurationsMs": [b - a for a, b in itertools.pairwise(ints)],
    }
