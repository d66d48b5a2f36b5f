"""Cut text into short clauses so a whole-sentence TTS (Piper) can start speaking early.

The first piece is kept short (it decides first-audio latency); the rest follow at natural
breaks (sentence ends, then commas/semicolons/colons/dashes), merged so no piece is tiny.
"""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?…])\s+")
_CLAUSE = re.compile(r"(?<=[,;:\u2014\u2013])\s+")  # also em and en dashes


def split_clauses(text: str, first_max_words: int = 6, min_words: int = 3) -> list[str]:
    text = " ".join(text.split())
    if not text:
        return []
    pieces: list[str] = []
    for sentence in _SENTENCE.split(text):
        pieces.extend(p for p in _CLAUSE.split(sentence) if p)
    merged: list[str] = []
    for piece in pieces:
        # The first piece may stay short: it only makes the start earlier.
        mergeable = len(merged) > 1 and merged[-1][-1] not in ".!?…"
        if mergeable and len(merged[-1].split()) < min_words:
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    first = merged[0].split()
    if len(first) > first_max_words:
        # Break the first clause after a few words: a brief seam buys a much earlier start.
        cut = max(min_words, first_max_words // 2 + 1)
        merged[0:1] = [" ".join(first[:cut]), " ".join(first[cut:])]
    return merged
