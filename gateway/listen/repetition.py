"""Whisper's repetition loops ("Hello, can you hear me? Hello, can you hear me? ..."): found and
collapsed on the word level.

A loop is a run of ``n`` words repeated back to back: for a phrase of ``n >= 4`` words, twice
or more (what Whisper does with too short an encoder context: "What time is it? What time is
it? What time is") or once followed by a cut-off copy of at least four words running to the
end ("How far is the moon from the earth? How far is the moon from the"); three times for
three words; four times for shorter runs (people do say "no, no, no" and "I don't know, I
don't know"). Words compare without case and punctuation. ``collapse_loops`` keeps the first
copy of every loop (and drops a cut-off copy after it).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[\w']+")
MAX_PHRASE = 12


def _key(word: str) -> str:
    return "".join(_WORD.findall(word.lower()))


def _repeat_at(keys: list[str], start: int, n: int) -> int:
    """How many times ``keys[start:start+n]`` repeats back to back from ``start``."""
    phrase = keys[start:start + n]
    if len(phrase) < n or not any(phrase):
        return 0
    count = 1
    while keys[start + count * n: start + (count + 1) * n] == phrase:
        count += 1
    return count


def _min_repeats(n: int) -> int:
    return 2 if n >= 4 else 3 if n == 3 else 4


def _cut_off_copy(keys: list[str], start: int, n: int) -> bool:
    """``keys[start:start+n]`` is followed, up to the end, by a cut-off copy of itself of at
    least ``max(4, n // 2)`` words (the decoder stopped in the middle of its second lap)."""
    tail = keys[start + n:]
    return n >= 4 and max(4, n // 2) <= len(tail) < n and tail == keys[start:start + len(tail)]


def find_loop(text: str) -> tuple[int, int, int] | None:
    """``(start_word, phrase_words, repeats)`` of the first loop in ``text``, else None
    (``repeats`` counts whole copies: 1 for a phrase followed only by a cut-off copy)."""
    keys = [_key(w) for w in text.split()]
    for start in range(len(keys)):
        for n in range(1, min(MAX_PHRASE, len(keys) - start) + 1):
            repeats = _repeat_at(keys, start, n)
            if repeats >= _min_repeats(n) or (repeats == 1 and _cut_off_copy(keys, start, n)):
                return start, n, repeats
    return None


def has_loop(text: str) -> bool:
    return find_loop(text) is not None


def collapse_loops(text: str) -> str:
    """``text`` with every loop cut to its first copy (a trailing partial copy dropped too)."""
    words = text.split()
    while True:
        found = find_loop(" ".join(words))
        if found is None:
            return " ".join(words)
        start, n, repeats = found
        end = start + n * repeats
        keys = [_key(w) for w in words]
        phrase = keys[start:start + n]
        # A cut-off last copy (the token cap stopped it mid-phrase) goes too.
        tail = 0
        while end + tail < len(words) and tail < n and keys[end + tail] == phrase[tail]:
            tail += 1
        words = words[:start + n] + words[end + tail:]
