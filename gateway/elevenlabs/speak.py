"""Clauses -> encoded audio pieces with their word timings, for one context or request.

``ClauseSpeaker(voice, fmt)`` keeps one resampler and one encoder for the whole stream (an mp3
or Ogg stream stays one stream across clauses). ``speak(clause)`` yields a ``Piece`` per unit of
audio whose words are known: each chunk that carries Piper's own timings at once; for a backend
that gives none (CosyVoice), the whole clause's audio when it ends, its words estimated at a
constant character rate (``gateway.text.timing``). Each clause is given the one before it
(``after``): a voice that takes it (Piper) joins a clause cut mid-sentence to the next without a
seam. ``finish()`` drains the resampler and the encoder (mp3 and Opus encode on a thread, one
piece at a time). Closing the ``speak`` iterator closes the synthesis stream (and its upstream
request).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from gateway.elevenlabs.formats import Encoder, OutputFormat
from gateway.media.resample import RateFollower
from gateway.text.timing import WordTiming, estimate_words
from gateway.tts.base import Synthesizer, open_stream


@dataclass(frozen=True, slots=True)
class Piece:
    audio: bytes  # encoded in the output format (may be empty: an encoder's look-ahead)
    words: tuple[WordTiming, ...]  # ms from this piece's first sample
    duration_ms: float  # of the PCM this piece was made from


class ClauseSpeaker:
    def __init__(self, voice: Synthesizer, fmt: OutputFormat) -> None:
        self.voice = voice
        self.format = fmt
        self._resampler = RateFollower(fmt.sample_rate)
        self._encoder: Encoder = fmt.open()
        self.samples_out = 0  # PCM samples at the output rate, so far
        self._job: asyncio.Future[Piece] | None = None  # the last encode on a thread
        self._previous: str | None = None  # the clause spoken before (the voice continues it)

    def _encode(self, pcm: np.ndarray, rate: int) -> bytes:
        out = self._resampler.push(pcm, rate)
        self.samples_out += out.size
        return self._encoder.write(out.astype("<i2", copy=False).tobytes())

    def _piece(self, pcm: np.ndarray, rate: int, words: tuple[WordTiming, ...]) -> Piece:
        return Piece(self._encode(pcm, rate), words, pcm.size * 1000 / rate)

    async def _piece_off_loop(self, pcm: np.ndarray, rate: int,
                              words: tuple[WordTiming, ...]) -> Piece:
        """An mp3/Opus encoder costs milliseconds per second of audio: off the event loop
        (one piece at a time, so the encoder is never used from two threads at once)."""
        if self.format.codec in ("pcm", "ulaw"):
            return self._piece(pcm, rate, words)
        self._job = asyncio.get_running_loop().run_in_executor(None, self._piece, pcm, rate,
                                                                words)
        # a cancelled speaker leaves the job to finish on its thread; finish() waits for it
        return await asyncio.shield(self._job)

    async def speak(self, clause: str) -> AsyncIterator[Piece]:
        untimed: list[np.ndarray] = []
        untimed_rate = 0
        spoken = 0  # words of the clause already carried by timed chunks
        odd = b""
        stream = open_stream(self.voice, clause, after=self._previous)
        self._previous = clause
        async with contextlib.aclosing(stream):
            async for chunk in stream:
                data = odd + chunk.data
                cut = len(data) & ~1
                odd = data[cut:]
                pcm = np.frombuffer(data[:cut], dtype="<i2")
                if chunk.words:
                    if untimed:  # a backend that times only some chunks: never seen, but kept
                        yield await self._untimed(clause, spoken, untimed, untimed_rate)
                        untimed = []
                    spoken += len(chunk.words)
                    yield await self._piece_off_loop(pcm, chunk.sample_rate, chunk.words)
                elif pcm.size:
                    if untimed and chunk.sample_rate != untimed_rate:
                        yield await self._untimed(clause, spoken, untimed, untimed_rate)
                        untimed, spoken = [], len(clause.split())
                    untimed.append(pcm)
                    untimed_rate = chunk.sample_rate
        if untimed:
            yield await self._untimed(clause, spoken, untimed, untimed_rate)

    async def _untimed(self, clause: str, spoken: int, parts: list[np.ndarray], rate: int
                       ) -> Piece:
        pcm = np.concatenate(parts)
        rest = " ".join(clause.split()[spoken:])
        return await self._piece_off_loop(pcm, rate, tuple(estimate_words(rest, pcm, rate)))

    async def finish(self) -> bytes:
        if self._job is not None:
            with contextlib.suppress(Exception):
                await self._job  # the encoder is never used from two threads at once
        tail = self._resampler.flush()
        self.samples_out += tail.size
        return self._encoder.write(tail.astype("<i2", copy=False).tobytes()) + self._encoder.flush()
