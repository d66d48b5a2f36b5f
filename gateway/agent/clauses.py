"""Streamed reply text -> clauses for speech, each yielded as soon as it is complete.

The cuts are ``gateway.tts.clauses.split_clauses``'s (a short first piece, then sentence and
clause breaks, short pieces merged): the streamed clauses are exactly what ``split_clauses``
makes of the whole reply. A clause is complete once text after its break has arrived (a break
needs the whitespace after it; a token that ends mid-word only ever touches the last, still
open, clause). The last clause comes when the stream ends. Closing the clause stream closes
the token stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator

from gateway.tts.clauses import split_clauses


class ClauseCutter:
    """Incremental form: ``feed`` text pieces, get the clauses they complete; ``finish``."""

    def __init__(self, first_max_words: int = 6, min_words: int = 3) -> None:
        self.first_max_words = first_max_words
        self.min_words = min_words
        self._text = ""
        self._emitted = 0

    def _split(self, text: str) -> list[str]:
        return split_clauses(text, first_max_words=self.first_max_words,
                             min_words=self.min_words)

    def feed(self, piece: str) -> list[str]:
        self._text += piece
        # Every piece but the last is final: a break needs the whitespace after it, so text
        # after the break has arrived, and a half-word at the end only touches the last piece.
        pieces = self._split(self._text)
        ready = pieces[self._emitted:len(pieces) - 1]
        self._emitted += len(ready)
        return ready

    def finish(self) -> list[str]:
        rest = self._split(self._text)[self._emitted:]
        self._emitted += len(rest)
        return rest


async def stream_clauses(pieces: AsyncIterable[str], *, first_max_words: int = 6,
                         min_words: int = 3) -> AsyncIterator[str]:
    cutter = ClauseCutter(first_max_words, min_words)
    try:
        async for piece in pieces:
            for clause in cutter.feed(piece):
                yield clause
        for clause in cutter.finish():
            yield clause
    finally:
        aclose = getattr(pieces, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):  # already running/closed
                await aclose()
