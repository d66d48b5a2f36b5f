"""A clause rendered ahead of its ``say``: synthesized and encoded into memory, played later.

The full-duplex loop prepares its reply while the turn's end is still awaited (the speculative
final transcript is in, the user has not yet been quiet long enough): the agent's first clause
is rendered by ``Speaker.prerender`` into a ``Prerender``; when the turn does end on that
transcript, ``Speaker.say(..., prerendered=p)`` plays its frames as they are (the first packet
goes out at once), else the prerender is cancelled and its work dropped. Rendering runs ahead
of the consumer by at most ``ahead`` frames (a long clause does not pile up in memory while
nobody plays it); a consumer reads the frames already made, then the rest as they come.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from gateway.text.timing import WordTiming
from gateway.tts.base import SynthesisError

AHEAD_FRAMES = 250  # 5 s of audio made before anyone plays it


class Prerender:
    """One clause's encoded frames, made by a task of the speaker's, read by one consumer."""

    def __init__(self, text: str, voice: str, instructions: str | None = None,
                 ahead: int = AHEAD_FRAMES) -> None:
        self.text = text
        self.voice = voice
        self.instructions = instructions
        self.ahead = ahead
        self.payloads: list[bytes] = []
        self.started_at = time.monotonic()
        self.first_pcm_at: float | None = None  # the voice's first PCM (timelines)
        self.frames_encoded = 0
        self.frames_rendered = 0  # 20 ms PCM frames the voice has produced so far
        self.words: list[WordTiming] = []  # when each word plays (ms from the first sample)
        self.cached = False  # the phrase cache had it: nothing rendered
        self.done = False
        self.error: str | None = None
        self.task: asyncio.Task[None] | None = None
        self._read = 0  # frames the consumer took
        self._more = asyncio.Event()  # a frame was added, or rendering ended
        self._taken = asyncio.Event()  # the consumer took a frame

    def matches(self, text: str, voice: str, instructions: str | None) -> bool:
        return (self.text, self.voice, self.instructions) == (text, voice, instructions)

    # -- the producer (the speaker's task) ---------------------------------------------------
    async def add(self, payload: bytes) -> None:
        while len(self.payloads) - self._read >= self.ahead:
            self._taken.clear()
            await self._taken.wait()
        self.payloads.append(payload)
        self._more.set()

    def finish(self, error: str | None = None) -> None:
        self.done = True
        self.error = error
        self._more.set()

    # -- the consumer ------------------------------------------------------------------------
    async def frames(self) -> AsyncIterator[bytes]:
        """Every frame, in order, waiting for those not made yet; raises ``SynthesisError``
        if rendering failed."""
        while True:
            while self._read < len(self.payloads):
                payload = self.payloads[self._read]
                self._read += 1
                self._taken.set()
                yield payload
            if self.done:
                if self.error is not None:
                    raise SynthesisError(self.error)
                return
            self._more.clear()
            await self._more.wait()

    def cancel(self) -> None:
        """Stop rendering (nobody will play it) and let go of what was made."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if not self.done:
            self.finish("cancelled")
        self.payloads = []
        self._read = 0
