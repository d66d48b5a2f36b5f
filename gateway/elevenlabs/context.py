"""One ElevenLabs context: text pushed in as it is written, audio + alignment out, in order.

The text goes through the one segmenter (``gateway.text``): each clause is spoken as soon as
it is complete (the first one as soon as its first ``EAGER_FIRST_WORDS`` words are), ``flush``
speaks what is buffered now, and one task (owned here, cancelled by ``abort``) synthesises the
clauses one after another and sends each piece of audio with its alignment as it exists, then
``{"isFinal": true}`` once the input is closed and everything asked for has been sent.

``close`` (the client's ``close_context``) ends the input. What was flushed before it is still
spoken: both clients flush and then close at the end of a reply (Pipecat's
``on_turn_context_completed``, LiveKit's ``flush=True`` then ``close_context``) and wait for the
audio and ``isFinal``. Text not flushed by then is dropped, and a clause of it being synthesised
is stopped: that is an interruption (Pipecat closes the context of a reply the user talked
over, without flushing), and its audio would only be thrown away.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.elevenlabs.alignment import char_alignment
from gateway.elevenlabs.formats import OutputFormat
from gateway.elevenlabs.speak import ClauseSpeaker, Piece
from gateway.text.segmenter import Segmenter
from gateway.tts.base import SynthesisError, Synthesizer

log = logging.getLogger(__name__)
# The first clause of a context goes as soon as this many words of it are complete: its text is
# still being written, so waiting to see how long the sentence runs would cost one word per
# LLM token (bench/elevenlabs_first_audio.py measures it). 0: the segmenter's usual first cut.
# 2, not 3, since the voice continues a clause cut mid-sentence without a seam (``after``:
# Piper renders the next clause after the last words, unheard; bench/first_piece_seam.py: the
# joined pieces score higher PESQ against the one-piece render than 3 words without it did).
EAGER_FIRST_WORDS = 2
Send = Callable[[dict[str, Any]], Awaitable[None]]


class ContextError(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class SpeechContext:
    def __init__(self, context_id: str | None, voice: Synthesizer, fmt: OutputFormat,
                 send: Send, max_chars: int, on_done: Callable[[SpeechContext], None],
                 first_words: int = EAGER_FIRST_WORDS) -> None:
        self.context_id = context_id
        self._speaker = ClauseSpeaker(voice, fmt)
        self._send = send
        self._max_chars = max_chars
        self._on_done = on_done
        self._segmenter = Segmenter(eager_first_words=first_words)
        self._clauses: deque[tuple[int, str]] = deque()
        self._seq = 0  # clauses queued so far
        self._flushed = 0  # clauses queued up to the last flush (kept by close)
        self._current = 0  # seq of the clause being synthesised (0: none)
        self.chars = 0
        self.closed = False
        self._wake = asyncio.Event()
        self._speaking: asyncio.Task[None] | None = None
        self._task = asyncio.create_task(self._run(), name=f"elevenlabs-context-{context_id}")

    # -- the client's messages -----------------------------------------------------------

    def push(self, text: str) -> None:
        if self.closed:
            raise ContextError("context_closed", f"context {self.context_id!r} is closed")
        if self.chars + len(text) > self._max_chars:
            raise ContextError("text_too_long", f"context {self.context_id!r} would have more "
                               f"than {self._max_chars} characters of text")
        self.chars += len(text)
        self._queue(self._segmenter.feed(text))

    def flush(self) -> None:
        if not self.closed:
            self._queue(self._segmenter.flush())
            self._flushed = self._seq

    def close(self) -> None:
        """End of input: flushed text is still spoken, the rest dropped (see the module)."""
        if self.closed:
            return
        self.closed = True
        self._segmenter.end()
        while self._clauses and self._clauses[-1][0] > self._flushed:
            self._clauses.pop()
        if self._current > self._flushed and self._speaking is not None:
            self._speaking.cancel()
        self._wake.set()

    def end_input(self) -> None:
        """Everything pushed is spoken, then isFinal (stream-input's ``{"text": ""}``)."""
        self.flush()
        self.close()

    async def abort(self) -> None:
        """The socket is gone: stop at once."""
        self.closed = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        except Exception:  # already failed on its own: nothing left to stop
            log.exception("context %r failed", self.context_id)

    @property
    def done(self) -> bool:
        return self._task.done()

    # -- the synthesis task ------------------------------------------------------------

    def _queue(self, clauses: list[str]) -> None:
        for clause in clauses:
            self._seq += 1
            self._clauses.append((self._seq, clause))
        if clauses:
            self._wake.set()

    async def _run(self) -> None:
        try:
            while True:
                if not self._clauses:
                    if self.closed:
                        break
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                self._current, clause = self._clauses.popleft()
                self._speaking = asyncio.create_task(self._speak(clause))
                try:
                    await self._speaking
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # this task itself is cancelled (abort), not just the clause
                except SynthesisError as exc:
                    log.warning("context %r: %s", self.context_id, exc)
                    await self._send(self._message({"error": "synthesis_failed",
                                                    "message": str(exc)}))
                finally:
                    self._speaking.cancel()
                    self._current = 0
            tail = await self._speaker.finish()
            if tail:
                await self._send(self._message({"audio": _b64(tail), "alignment": None,
                                                "normalizedAlignment": None}))
            await self._send(self._message({"isFinal": True}))
        finally:
            if self._speaking is not None:
                self._speaking.cancel()
            self._on_done(self)

    async def _speak(self, clause: str) -> None:
        pieces = self._speaker.speak(clause)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                await self._send(self.piece_message(piece))

    def piece_message(self, piece: Piece) -> dict[str, Any]:
        alignment = char_alignment(piece.words, piece.duration_ms) if piece.words else None
        return self._message({"audio": _b64(piece.audio) if piece.audio else None,
                              "isFinal": None, "normalizedAlignment": alignment,
                              "alignment": alignment})

    def _message(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.context_id is not None:
            body["contextId"] = self.context_id
        return body


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
