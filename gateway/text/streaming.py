"""An async stream of text pieces (an agent's tokens) -> an async stream of clauses.

Each clause is yielded as soon as the segmenter has it; the last ones when the stream ends.
Closing the clause stream closes the token stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator

from gateway.text.segmenter import FIRST_MAX_WORDS, MIN_WORDS, Segmenter


async def stream_clauses(pieces: AsyncIterable[str], *, first_max_words: int = FIRST_MAX_WORDS,
                         min_words: int = MIN_WORDS) -> AsyncIterator[str]:
    segmenter = Segmenter(first_max_words, min_words)
    try:
        async for piece in pieces:
            for clause in segmenter.feed(piece):
                yield clause
        for clause in segmenter.end():
            yield clause
    finally:
        aclose = getattr(pieces, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):  # already running/closed
                await aclose()
