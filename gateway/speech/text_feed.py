"""An open utterance: its text appended while it already speaks (an LLM's reply as it streams).

``POST /v1/sessions/{id}/speech`` with ``"open": true`` starts an utterance whose text is not
all there yet; ``POST .../speech/{utterance_id}/text`` ``{"text", "flush"?, "end"?}`` appends
to it. The text goes through the one segmenter (the first clause as soon as its first two words
are complete, each next one as soon as it is complete, ``flush`` for what is buffered);
``FedVoice`` speaks the clauses one after another as one utterance, in the session's queue like
any other. The input ends with ``end``, or after ``idle_s`` without an append (an open
utterance never holds the speaker for ever), or when the utterance is interrupted. Bounded: the
text per utterance (``max_chars``) and the clauses waiting (their text is within it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from gateway.text.segmenter import Segmenter
from gateway.text.timing import estimate_words
from gateway.tts.base import PcmChunk, Synthesizer, open_stream

IDLE_S = 30.0
FIRST_WORDS = 2  # as an ElevenLabs context (elevenlabs/context.py says why)


class TextFeedClosed(Exception):
    """The utterance's input has ended: nothing more can be appended."""


class TextFeed:
    def __init__(self, max_chars: int, idle_s: float = IDLE_S,
                 first_words: int = FIRST_WORDS) -> None:
        self.max_chars = max_chars
        self.idle_s = idle_s
        self.chars = 0
        self.ended = False
        self._segmenter = Segmenter(eager_first_words=first_words)
        self._clauses: deque[str] = deque()
        self._more = asyncio.Event()

    def append(self, text: str, flush: bool = False, end: bool = False) -> None:
        if self.ended:
            raise TextFeedClosed("this utterance's text has ended")
        if self.chars + len(text) > self.max_chars:
            raise ValueError(f"the utterance would have more than {self.max_chars} characters")
        self.chars += len(text)
        self._clauses.extend(self._segmenter.feed(text))
        if flush:
            self._clauses.extend(self._segmenter.flush())
        if end:
            self.close()
        self._more.set()

    def close(self) -> None:
        """End of input: what is buffered is still spoken."""
        if not self.ended:
            self.ended = True
            self._clauses.extend(self._segmenter.end())
            self._more.set()

    async def clauses(self) -> AsyncIterator[str]:
        while True:
            while self._clauses:
                yield self._clauses.popleft()
            if self.ended:
                return
            self._more.clear()
            try:
                await asyncio.wait_for(self._more.wait(), self.idle_s)
            except TimeoutError:
                self.close()  # no append for idle_s: the input is over


class FedVoice:
    """``voice`` speaking the clauses of a ``TextFeed`` (the ``text`` it is given is ignored).

    Never cached (its text is not known up front). For a backend that times no words, each
    clause's words are estimated when the clause ends and carried by an empty chunk with times
    before it (negative: the words of the audio just sent)."""

    cacheable = False

    def __init__(self, voice: Synthesizer, feed: TextFeed) -> None:
        self.name = voice.name
        self.voice = voice
        self.feed = feed

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        clauses = self.feed.clauses()
        previous: str | None = None  # the voice continues it (Piper: no seam after a cut)
        async with contextlib.aclosing(clauses):
            async for clause in clauses:
                untimed: list[bytes] = []
                rate = 0
                timed = False  # a chunk carried words: the backend times them (an untimed
                # chunk is then the rest of a word, or a pause: Piper's first piece's rest)
                stream = open_stream(self.voice, clause, after=previous)
                previous = clause
                async with contextlib.aclosing(stream):
                    async for chunk in stream:
                        timed = timed or bool(chunk.words)
                        if not chunk.words:
                            untimed.append(chunk.data)
                            rate = chunk.sample_rate
                        yield chunk
                if untimed and not timed:
                    data = b"".join(untimed)
                    pcm = np.frombuffer(data[: len(data) & ~1], dtype="<i2")
                    ms = pcm.size * 1000 / rate
                    words = tuple(w.shifted(-ms) for w in estimate_words(clause, pcm, rate))
                    yield PcmChunk(b"", rate, words)

    async def close(self) -> None:
        """Nothing of its own: the voice belongs to the gateway."""
