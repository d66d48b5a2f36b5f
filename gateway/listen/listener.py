"""One stream's hearing, assembled: 20 ms frames in -> VAD -> turns -> partial and final
transcripts out, as one ordered event stream.

``push(frame)`` is synchronous and cheap (the Silero VAD costs ~0.1 ms of CPU a frame, run
inline; a thread hop would cost about as much); it returns the turn events at once (react to
``BargeIn`` there, with no queue in between) and also queues them for ``events()``. While the
user speaks, the growing segment is re-decoded about every ``partial_interval`` s (only when
the recogniser has a free worker, and not once the user has been quiet for ``partial_quiet``
s); when the turn ends its final decode runs, finals one after another in turn order, so each
listener has at most one final queued on the recogniser. Partials of a turn that has ended are
dropped. A failed final decode is reported as ``TranscriptionFailed``, and hearing goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from gateway.listen.asr import RecognitionError, Recognizer, Transcript
from gateway.listen.audio import RATE, as_int16
from gateway.listen.partials import DEFAULT_INTERVAL, partial_transcripts
from gateway.listen.turns import (
    BargeIn,
    SpeechStarted,
    SpeechStopped,
    TurnDetector,
    TurnEvent,
    TurnOptions,
)
from gateway.listen.vad import SileroVad, VoiceDetector

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartialTranscript:
    turn: int
    text: str
    transcript: Transcript


@dataclass(frozen=True, slots=True)
class FinalTranscript:
    turn: int
    text: str
    transcript: Transcript
    stopped: SpeechStopped


@dataclass(frozen=True, slots=True)
class TranscriptionFailed:
    turn: int
    error: RecognitionError


ListenEvent = (SpeechStarted | BargeIn | SpeechStopped | PartialTranscript | FinalTranscript
               | TranscriptionFailed)


class Listener:
    def __init__(self, recognizer: Recognizer, *, vad: VoiceDetector | None = None,
                 turns: TurnOptions | None = None, partials: bool = True,
                 partial_interval: float = DEFAULT_INTERVAL,
                 min_final_seconds: float = 0.25, partial_quiet: float = 0.2) -> None:
        self.recognizer = recognizer
        self.vad = vad or SileroVad()
        self.detector = TurnDetector(turns)
        self.partials = partials
        self.partial_interval = partial_interval
        self.min_final_seconds = min_final_seconds
        self.partial_quiet = partial_quiet  # no new partial after this much trailing silence
        self.turn = 0  # the current (or last) turn's number, from 1
        self._events: asyncio.Queue[ListenEvent | None] = asyncio.Queue()
        self._finals: asyncio.Queue[tuple[int, SpeechStopped] | None] = asyncio.Queue()
        self._partial_task: asyncio.Task[None] | None = None
        self._final_task: asyncio.Task[None] | None = None
        self._closed = False

    # -- input ------------------------------------------------------------------------------
    def push(self, frame: np.ndarray | bytes) -> list[TurnEvent]:
        """One 20 ms frame (320 samples of 16 kHz int16); the turn events it caused."""
        if self._closed:
            raise RuntimeError("the listener is closed")
        pcm = as_int16(frame)
        events = self.detector.push(pcm, self.vad.probability(pcm))
        self._handle(events)
        return events

    def flush(self) -> list[TurnEvent]:
        """End the turn in progress (end of the stream)."""
        events = self.detector.flush()
        self._handle(events)
        return events

    def _handle(self, events: list[TurnEvent]) -> None:
        for event in events:
            if isinstance(event, SpeechStarted):
                self.turn += 1
                self._start_partials(self.turn)
            elif isinstance(event, SpeechStopped):
                self._stop_partials()
                self._final(self.turn, event)
            self._events.put_nowait(event)

    # -- output -----------------------------------------------------------------------------
    async def events(self) -> AsyncIterator[ListenEvent]:
        """Everything heard, in order, until ``close``."""
        while (event := await self._events.get()) is not None:
            yield event

    # -- partials ---------------------------------------------------------------------------
    def _start_partials(self, turn: int) -> None:
        self._stop_partials()
        if self.partials:
            self._partial_task = asyncio.get_running_loop().create_task(self._run_partials(turn))

    def _stop_partials(self) -> None:
        if self._partial_task is not None:
            self._partial_task.cancel()
            self._partial_task = None

    async def _run_partials(self, turn: int) -> None:
        stream = partial_transcripts(
            self.recognizer, self.detector.segment_audio, interval=self.partial_interval,
            wanted=lambda: self.detector.silence < self.partial_quiet)
        try:
            async for transcript in stream:
                if turn == self.turn and self.detector.in_speech:
                    self._events.put_nowait(PartialTranscript(turn, transcript.text, transcript))
        except RecognitionError as exc:
            log.info("partial decode failed: %s", exc)
        finally:
            await stream.aclose()

    # -- finals -----------------------------------------------------------------------------
    def _final(self, turn: int, stopped: SpeechStopped) -> None:
        if len(stopped.audio) < self.min_final_seconds * RATE:
            return
        self._finals.put_nowait((turn, stopped))
        if self._final_task is None:
            self._final_task = asyncio.get_running_loop().create_task(self._run_finals())

    async def _run_finals(self) -> None:
        while (item := await self._finals.get()) is not None:
            turn, stopped = item
            try:
                transcript = await self.recognizer.transcribe(stopped.audio, final=True)
            except RecognitionError as exc:
                self._events.put_nowait(TranscriptionFailed(turn, exc))
                continue
            if transcript is not None:
                self._events.put_nowait(FinalTranscript(turn, transcript.text, transcript,
                                                        stopped))

    async def close(self, *, drain: bool = False) -> None:
        """Stop hearing. ``drain``: let queued final decodes finish (and be reported) first."""
        if self._closed:
            return
        self._closed = True
        self._stop_partials()
        if self._final_task is not None:
            if drain:
                self._finals.put_nowait(None)
                await self._final_task
            else:
                self._final_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._final_task
        self._events.put_nowait(None)
