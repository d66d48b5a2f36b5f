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

Speculative finals (``speculate_ms``, ``SPECULATE_MS`` by default; None = off): once the user
has been quiet that long (at least the turn detector's post-speech pad, so the segment's audio
is complete), the final decode of the segment as it would end now starts at once, while the turn
detector still waits for its ``stop_ms`` of silence. If the turn then ends with no new voiced
frame (the same audio), that decode is the final transcript: the endpointing wait hides the ASR
time. If the user resumes, it is discarded (cancelled if it has not started on the recogniser
yet) and a later one is made when they stop again. A segment too short to decode ends as
``SegmentSkipped``.

A speculation that is decoded while the turn's end is still awaited is announced at once as a
``TentativeTranscript`` (the text the final will have if the user stays quiet): the duplex
loop prepares its reply on it (``session/duplex.py``). No tentative comes when the turn ended
first (the final then follows directly), nor for a speculation the user talked over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np

from gateway.listen.asr import RecognitionError, Recognizer, Transcript
from gateway.listen.audio import RATE, as_int16
from gateway.listen.partials import DEFAULT_INTERVAL, partial_transcripts
from gateway.listen.turn_model import TurnJudge, TurnModel, Verdict
from gateway.listen.turns import (
    BargeIn,
    SemanticEndpointing,
    SemanticOptions,
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
    speculative: bool = False  # decoded before the turn ended (a speculation committed)


@dataclass(frozen=True, slots=True)
class TentativeTranscript:
    """A speculative final decoded before the turn ended: the final transcript's text if the
    user stays quiet (then a ``FinalTranscript`` with ``speculative=True`` and this text
    follows); if the user speaks on, a later tentative or final replaces it."""

    turn: int
    text: str
    transcript: Transcript


@dataclass(frozen=True, slots=True)
class SegmentSkipped:
    """The turn's segment was too short to decode: no final transcript comes for it."""

    turn: int
    stopped: SpeechStopped


@dataclass(eq=False, slots=True)
class _Speculation:
    turn: int
    stopped_at: float  # the stream time SpeechStopped.at would have
    samples: int
    task: asyncio.Task[Transcript | None]


@dataclass(frozen=True, slots=True)
class TranscriptionFailed:
    turn: int
    error: RecognitionError


ListenEvent = (SpeechStarted | BargeIn | SpeechStopped | PartialTranscript | FinalTranscript
               | TentativeTranscript | TranscriptionFailed | SegmentSkipped)
_Final = tuple[int, SpeechStopped, _Speculation | None]

#: start the final decode after this much silence, before the turn ends (None or 0: off)
SPECULATE_MS = 100


class Listener:
    def __init__(self, recognizer: Recognizer, *, vad: VoiceDetector | None = None,
                 turns: TurnOptions | None = None, partials: bool = True,
                 partial_interval: float = DEFAULT_INTERVAL,
                 min_final_seconds: float = 0.25, partial_quiet: float = 0.2,
                 speculate_ms: int | None = SPECULATE_MS, turn_model: TurnModel | None = None,
                 semantic: SemanticOptions | None = None) -> None:
        self.recognizer = recognizer
        self.vad = vad or SileroVad()
        self.detector = TurnDetector(turns)
        self.partials = partials
        self.partial_interval = partial_interval
        self.min_final_seconds = min_final_seconds
        self.partial_quiet = partial_quiet  # no new partial after this much trailing silence
        if speculate_ms is not None and speculate_ms <= 0:
            speculate_ms = None
        self.speculate_ms = speculate_ms
        self._speculate_frames = (None if speculate_ms is None
                                  else self.detector.options.frames(speculate_ms))
        self._speculation: _Speculation | None = None
        self.speculations = 0  # speculative final decodes started
        self.speculations_used = 0  # ... that became the final transcript
        self.speculations_discarded = 0  # ... dropped: the user spoke again
        self.turn = 0  # the current (or last) turn's number, from 1
        self._events: asyncio.Queue[ListenEvent | None] = asyncio.Queue()
        self._finals: asyncio.Queue[_Final | None] = asyncio.Queue()
        self._partial_task: asyncio.Task[None] | None = None
        self._final_task: asyncio.Task[None] | None = None
        self._closed = False
        self._judge: TurnJudge | None = None
        self._semantic: SemanticEndpointing | None = None
        self._pause: tuple[int, int] | None = None  # (turn, last voiced frame) being judged
        self._probed = False
        self.verdicts: list[tuple[float, float]] = []  # (probability, seconds), the last 32
        self.set_turn_detection(turn_model, semantic)

    # -- end of turn ------------------------------------------------------------------------
    @property
    def turn_detector(self) -> str:
        return "silence" if self._judge is None else self._judge.model.name

    def set_turn_detection(self, model: TurnModel | None,
                           options: SemanticOptions | None = None) -> None:
        """Decide the end of turns with ``model`` (None: silence alone), from the next pause on
        (a session's ``turn_detection`` may change while it runs)."""
        if self._judge is not None:
            self._judge.close()
        self._judge = None if model is None else TurnJudge(model, self._on_verdict)
        options = options or SemanticOptions()
        if self._speculate_frames is None and options.use_text:
            options = dataclasses.replace(options, use_text=False)  # no transcript will come
        self._semantic = None if model is None else SemanticEndpointing(options)
        self._pause, self._probed = None, False
        self.detector.stop_frames = self.detector.options.frames(self.detector.options.stop_ms)

    def _judge_pause(self) -> None:
        """After each frame: track the pause, ask the model once per pause, set the stop."""
        semantic, detector = self._semantic, self.detector
        if semantic is None or self._judge is None:
            return
        if not detector.in_speech:
            self._pause = None
            return
        pause = (self.turn, detector.last_voiced)
        if detector.silence == 0 or pause != self._pause:
            if self._pause is not None or self._probed:
                self._judge.cancel_waiting()
            self._pause, self._probed = pause, False
            semantic.new_pause()
        if not self._probed and detector.silence * 1000 >= semantic.options.probe_ms - 1e-6:
            self._probed = True
            self._judge.request(pause, detector.segment_audio())
        detector.stop_frames = detector.options.frames(semantic.stop_ms())

    def _on_verdict(self, verdict: Verdict) -> None:
        self.verdicts = [*self.verdicts[-31:], (verdict.probability, verdict.seconds)]
        if self._semantic is None or verdict.key != self._pause or self._closed:
            return
        self._semantic.probability = verdict.probability
        self._restop()

    def _on_text(self, turn: int, stopped_at: float, text: str) -> None:
        """The speculative transcript of the pause being judged."""
        detector = self.detector
        if self._semantic is None or self._pause is None or self._pause[0] != turn \
                or detector.time(self._pause[1] + 1) != stopped_at:
            return
        self._semantic.text = text
        self._restop()

    def _restop(self) -> None:
        assert self._semantic is not None
        detector = self.detector
        detector.stop_frames = detector.options.frames(self._semantic.stop_ms())
        if detector.in_speech and detector.silence > 0 \
                and round(detector.silence * 1000) >= self._semantic.stop_ms():
            self._handle(detector.end_now("semantic"))

    # -- input ------------------------------------------------------------------------------
    def push(self, frame: np.ndarray | bytes) -> list[TurnEvent]:
        """One 20 ms frame (320 samples of 16 kHz int16); the turn events it caused."""
        if self._closed:
            raise RuntimeError("the listener is closed")
        pcm = as_int16(frame)
        detector = self.detector
        events = detector.push(pcm, self.vad.probability(pcm))
        if events:
            self._handle(events)
        # (each of these does nothing out of speech, a speculation or semantic endpointing:
        # not called then, every frame of a pause)
        if self._speculation is not None or detector.in_speech:
            self._speculate()
        if self._semantic is not None and self._judge is not None:
            self._judge_pause()
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
                self._events.put_nowait(event)
                self._final(self.turn, event)
                continue
            self._events.put_nowait(event)

    # -- speculative finals -----------------------------------------------------------------
    def _speculate(self) -> None:
        """After each frame: drop a speculation the user talked over; start one once the
        user has been quiet ``speculate_ms``."""
        detector = self.detector
        spec = self._speculation
        if spec is not None and (spec.turn != self.turn or not detector.in_speech
                                 or detector.time(detector.last_voiced + 1) != spec.stopped_at):
            self._discard_speculation()
        if (self._speculate_frames is None or self._speculation is not None
                or not detector.in_speech
                or detector.silence < detector.time(self._speculate_frames)):
            return
        audio = detector.closing_audio()
        if audio is None or len(audio) < self.min_final_seconds * RATE:
            return
        task = asyncio.get_running_loop().create_task(
            self.recognizer.transcribe(audio, final=True), name="asr-speculative")
        task.add_done_callback(_consume_exception)
        spec = _Speculation(self.turn, detector.time(detector.last_voiced + 1), len(audio), task)
        task.add_done_callback(lambda _task: self._speculated(spec))
        self._speculation = spec
        self.speculations += 1

    def _speculated(self, spec: _Speculation) -> None:
        """A speculation's decode ended: announce it if the turn is still awaited on it."""
        if self._speculation is not spec or self._closed or spec.task.cancelled() \
                or spec.task.exception() is not None:
            return
        transcript = spec.task.result()
        if transcript is not None:
            self._events.put_nowait(TentativeTranscript(spec.turn, transcript.text, transcript))
            self._on_text(spec.turn, spec.stopped_at, transcript.text)

    def _discard_speculation(self) -> None:
        spec, self._speculation = self._speculation, None
        if spec is not None:
            spec.task.cancel()  # a decode not started yet leaves the recogniser's queue
            self.speculations_discarded += 1

    def _take_speculation(self, turn: int, stopped: SpeechStopped) -> _Speculation | None:
        spec, self._speculation = self._speculation, None
        if spec is None:
            return None
        if spec.turn == turn and spec.stopped_at == stopped.at \
                and spec.samples == len(stopped.audio):
            self.speculations_used += 1
            return spec
        spec.task.cancel()
        self.speculations_discarded += 1
        return None

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
        spec = self._take_speculation(turn, stopped)
        if len(stopped.audio) < self.min_final_seconds * RATE:
            self._events.put_nowait(SegmentSkipped(turn, stopped))
            return
        self._finals.put_nowait((turn, stopped, spec))
        if self._final_task is None:
            self._final_task = asyncio.get_running_loop().create_task(self._run_finals())

    async def _run_finals(self) -> None:
        while (item := await self._finals.get()) is not None:
            turn, stopped, spec = item
            try:
                if spec is not None:
                    transcript = await spec.task
                else:
                    transcript = await self.recognizer.transcribe(stopped.audio, final=True)
            except RecognitionError as exc:
                self._events.put_nowait(TranscriptionFailed(turn, exc))
                continue
            if transcript is not None:
                self._events.put_nowait(FinalTranscript(turn, transcript.text, transcript,
                                                        stopped, speculative=spec is not None))

    def stats(self) -> dict[str, int]:
        return {"speculations": self.speculations, "speculations_used": self.speculations_used,
                "speculations_discarded": self.speculations_discarded}

    def turn_stats(self) -> dict[str, object]:
        """The end-of-turn detector and its model's recent verdicts (probability, seconds)."""
        stats: dict[str, object] = {"turn_detector": self.turn_detector}
        if self._judge is not None:
            stats["turn_model"] = {"inferences": self._judge.inferences,
                                   "replaced": self._judge.replaced,
                                   "failures": self._judge.failures,
                                   "recent": [[round(p, 3), round(s * 1000, 1)]
                                              for p, s in self.verdicts[-8:]]}
        return stats

    async def close(self, *, drain: bool = False) -> None:
        """Stop hearing. ``drain``: let queued final decodes finish (and be reported) first."""
        if self._closed:
            return
        self._closed = True
        self._stop_partials()
        if self._judge is not None:
            self._judge.close()
        if self._speculation is not None and not drain:
            self._discard_speculation()
        if self._final_task is not None:
            if drain:
                self._finals.put_nowait(None)
                await self._final_task
            else:
                self._final_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._final_task
        self._events.put_nowait(None)


def _consume_exception(task: asyncio.Task[Transcript | None]) -> None:
    """A discarded speculation's failure is nobody's: do not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
