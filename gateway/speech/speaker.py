"""Utterances and the per-session speaker that turns them into queued Opus frames.

Data flows one way: text -> synthesizer (PCM, any rate) -> re-joined samples -> 24 kHz ->
20 ms frames -> Opus (encoded once) -> the bounded FrameQueue -> the paced track. The queue's
bound is the backpressure: synthesis is read only as fast as playout drains it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gateway.media.frame_queue import FrameQueue
from gateway.media.framer import Framer, SampleAligner
from gateway.media.frames import EncodedFrame
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.media.resample import Resampler
from gateway.runtime.worker_pool import WorkerPool, encoder_pool
from gateway.speech.phrase_cache import CachedPhrase, PhraseCache, PhraseKey, PhraseRecorder
from gateway.tts.base import SynthesisError, Synthesizer

log = logging.getLogger(__name__)

ENCODE_BATCH = 10  # frames per trip to the encoder threads (200 ms of audio)


class UtteranceState(StrEnum):
    QUEUED = "queued"
    SYNTHESIZING = "synthesizing"
    PLAYING = "playing"
    DONE = "done"
    INTERRUPTED = "interrupted"
    FAILED = "failed"


FINAL_STATES = (UtteranceState.DONE, UtteranceState.INTERRUPTED, UtteranceState.FAILED)


@dataclass(eq=False)
class Utterance:
    text: str
    voice: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: UtteranceState = UtteranceState.QUEUED
    error: str | None = None
    created_at: float = field(default_factory=time.monotonic)
    first_pcm_at: float | None = None
    first_frame_queued_at: float | None = None
    first_sent_at: float | None = None
    finished_at: float | None = None
    frames_encoded: int = 0
    cached: bool = False  # served from the phrase cache: no synthesis, no encoding
    frames_sent: int = 0
    total_frames: int | None = None  # known once synthesis has ended
    first_seq: int | None = None
    last_seq: int | None = None
    first_timestamp: int | None = None
    on_finish: Callable[[Utterance], None] | None = field(default=None, repr=False)
    _finished: asyncio.Event | None = field(default=None, repr=False)
    chars: int = 0  # len(text): the text itself is dropped once synthesis has ended

    def __post_init__(self) -> None:
        self.chars = len(self.text)

    @property
    def finished(self) -> asyncio.Event:
        """Set once the utterance is in a final state. Made on first use: an Event costs
        ≈0.75 KB and a session lists up to ``history`` utterances nobody waits on."""
        if self._finished is None:
            self._finished = asyncio.Event()
            if self.state in FINAL_STATES:
                self._finished.set()
        return self._finished

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        if self.first_sent_at is None:
            self.first_sent_at = at
            self.first_seq = seq
            self.first_timestamp = timestamp
            if self.state is UtteranceState.SYNTHESIZING:
                self.state = UtteranceState.PLAYING
        self.frames_sent += 1
        self.last_seq = seq
        if self.total_frames is not None and self.frames_sent >= self.total_frames:
            self.finish(UtteranceState.DONE)

    def finish(self, state: UtteranceState, error: str | None = None) -> None:
        if self.state in FINAL_STATES:
            return
        self.state = state
        self.error = error
        self.text = ""  # see ``chars``
        self.finished_at = time.monotonic()
        if self._finished is not None:
            self._finished.set()
        if self.on_finish is not None:
            self.on_finish(self)

    def as_json(self) -> dict[str, Any]:
        def ms(t: float | None) -> float | None:
            return None if t is None else round((t - self.created_at) * 1000, 3)

        return {
            "id": self.id,
            "voice": self.voice,
            "state": self.state.value,
            "error": self.error,
            "chars": self.chars,
            "frames_encoded": self.frames_encoded,
            "cached": self.cached,
            "frames_sent": self.frames_sent,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "first_timestamp": self.first_timestamp,
            "latency_ms": {
                "first_pcm": ms(self.first_pcm_at),
                "first_frame_queued": ms(self.first_frame_queued_at),
                "first_sent": ms(self.first_sent_at),
                "finished": ms(self.finished_at),
            },
            "server_overhead_ms": (
                None
                if self.first_pcm_at is None or self.first_sent_at is None
                else round((self.first_sent_at - self.first_pcm_at) * 1000, 3)
            ),
        }


class SpeechQueueFull(Exception):
    pass


class Speaker:
    """One session's speech: a bounded list of pending utterances and one producer task."""

    def __init__(
        self,
        frames: FrameQueue,
        settings: EncoderSettings,
        max_pending: int = 32,
        history: int = 64,
        cache: PhraseCache | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.frames = frames
        self.settings = settings
        self.encoders_created = 0  # one per synthesized utterance (replays need none)
        self.pool: WorkerPool = pool or encoder_pool()
        self.cache = cache if cache is not None and cache.enabled else None
        # Fully encoded utterances still playing out: stored in the cache once DONE.
        self._recordings: dict[Utterance, tuple[PhraseKey, PhraseRecorder]] = {}
        self.max_pending = max_pending
        self._pending: deque[tuple[Utterance, Synthesizer]] = deque()
        self._wakeup = asyncio.Event()
        self.idle = asyncio.Event()  # set while nothing is being produced or pending
        self._current: Utterance | None = None
        self._current_task: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.recent: deque[Utterance] = deque(maxlen=history)
        self._by_id: dict[str, Utterance] = {}
        self.counts = dict.fromkeys((s.value for s in UtteranceState), 0)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="speaker")

    def say(self, text: str, voice: Synthesizer, interrupt: bool = False) -> Utterance:
        self.start()  # the producer task exists once there is something to say
        if interrupt:
            self.interrupt()
        if len(self._pending) >= self.max_pending:
            raise SpeechQueueFull(f"{self.max_pending} utterances are already waiting")
        utterance = Utterance(text=text, voice=voice.name, on_finish=self._on_final)
        self._remember(utterance)
        self._pending.append((utterance, voice))
        self._wakeup.set()
        return utterance

    def interrupt(self) -> int:
        """Stop what is playing and drop what is waiting, at once. Returns utterances cut."""
        cut = 0
        while self._pending:
            utterance, _ = self._pending.popleft()
            self._finish(utterance, UtteranceState.INTERRUPTED)
            cut += 1
        if self._current_task is not None and not self._current_task.done():
            self._current_task.cancel()
        dropped = self.frames.clear()
        owners = {f.owner for f in dropped if f.owner is not None}
        if self._current is not None:
            owners.add(self._current)
        for owner in owners:
            if isinstance(owner, Utterance) and owner.state not in FINAL_STATES:
                self._finish(owner, UtteranceState.INTERRUPTED)
                cut += 1
        return cut

    def get(self, utterance_id: str) -> Utterance | None:
        return self._by_id.get(utterance_id)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def current(self) -> Utterance | None:
        return self._current

    async def close(self) -> None:
        self.interrupt()
        for task in (self._current_task, self._task):
            if task is not None:
                task.cancel()
        for task in (self._current_task, self._task):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # --- internals -----------------------------------------------------------------------------

    def _remember(self, utterance: Utterance) -> None:
        if len(self.recent) == self.recent.maxlen:
            old = self.recent[0]
            self._by_id.pop(old.id, None)
        self.recent.append(utterance)
        self._by_id[utterance.id] = utterance
        self.counts[UtteranceState.QUEUED.value] += 1

    def _on_final(self, utterance: Utterance) -> None:
        self.counts[utterance.state.value] += 1
        recording = self._recordings.pop(utterance, None)
        if recording is not None and self.cache is not None:
            if utterance.state is UtteranceState.DONE:  # complete, not cut, not failed
                self.cache.put_recording(*recording)

    @staticmethod
    def _finish(utterance: Utterance, state: UtteranceState, error: str | None = None) -> None:
        utterance.finish(state, error)

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self.idle.set()
                self._wakeup.clear()
                await self._wakeup.wait()
            self.idle.clear()
            utterance, voice = self._pending.popleft()
            self._current = utterance
            self._current_task = asyncio.create_task(
                self._produce(utterance, voice), name=f"utterance-{utterance.id}"
            )
            try:
                await asyncio.wait({self._current_task})
                if not self._current_task.cancelled():
                    exc = self._current_task.exception()
                    if exc is not None:
                        log.error("utterance %s failed: %r", utterance.id, exc)
                        self._finish(utterance, UtteranceState.FAILED, f"internal error: {exc!r}")
            finally:
                self._current = None
                self._current_task = None
                # Fully queued (or cut): the text is not needed again, and up to ``history``
                # finished utterances stay listed per session.
                utterance.text = ""
            if utterance.total_frames is None:  # cancelled before synthesis ended
                self._finish(utterance, UtteranceState.INTERRUPTED)
            # Otherwise it is fully queued and becomes DONE when its last frame is sent.
    async def _produce(self, utterance: Utterance, voice: Synthesizer) -> None:
        utterance.state = UtteranceState.SYNTHESIZING
        key: PhraseKey | None = None
        recorder: PhraseRecorder | None = None
        if self.cache is not None:
            key = self.cache.key(voice.name, utterance.text, self.settings)
            phrase = self.cache.get(key)
            if phrase is not None:
                await self._replay(utterance, phrase)
                return
            recorder = self.cache.recorder()
        # A fresh encoder per synthesized utterance: no session holds libopus state (≈43 KB)
        # while idle or replaying, and a barge-in never waits for the lock of an encoder a
        # cancelled batch may still be using on a worker thread (73 µs to make one here).
        encoder = OpusFrameEncoder(self.settings)
        self.encoders_created += 1
        aligner = SampleAligner()
        framer = Framer(FRAME_SAMPLES)
        resampler: Resampler | None = None
        index = 0
        try:
            async with contextlib.aclosing(voice.stream(utterance.text)) as chunks:
                async for chunk in chunks:
                    if utterance.first_pcm_at is None:
                        utterance.first_pcm_at = time.monotonic()
                    if resampler is None or resampler.in_rate != chunk.sample_rate:
                        resampler = Resampler(chunk.sample_rate)
                    samples = resampler.push(aligner.push(chunk.data))
                    frames = framer.push(samples)
                    index = await self._emit(utterance, encoder, frames, index, recorder)
        except SynthesisError as exc:
            log.warning("utterance %s: %s", utterance.id, exc)
            self._finish(utterance, UtteranceState.FAILED, str(exc))
            return
        tail = resampler.flush() if resampler is not None else None
        frames = framer.push(tail) if tail is not None and tail.size else []
        index = await self._emit(utterance, encoder, frames + framer.flush(), index, recorder)
        if key is not None and recorder is not None:
            self._recordings[utterance] = (key, recorder)
        self._all_queued(utterance, index)

    async def _replay(self, utterance: Utterance, phrase: CachedPhrase) -> None:
        """A phrase cache hit: its packets go straight to the queue, still paced by it."""
        utterance.cached = True
        frames = phrase.frames
        if frames:
            await self.frames.extend(frames[:1], utterance)
            utterance.first_frame_queued_at = time.monotonic()
            await self.frames.extend(frames[1:], utterance, first_index=1)
        self._all_queued(utterance, len(frames))

    def _all_queued(self, utterance: Utterance, count: int) -> None:
        utterance.total_frames = count
        if utterance.frames_sent >= count:  # nothing left in flight (or nothing at all)
            self._finish(utterance, UtteranceState.DONE)

    async def _emit(
        self,
        utterance: Utterance,
        encoder: OpusFrameEncoder,
        pcm_frames: list[bytes],
        index: int,
        recorder: PhraseRecorder | None,
    ) -> int:
        """Encode frames and queue them; returns the next index.

        A 24 kHz hybrid Opus frame costs ≈0.3 ms of CPU at complexity 9: on the loop thread that
        would delay every stream's pacing, so frames are encoded on the encoder pool in batches
        of up to ENCODE_BATCH, one thread hop per batch -- all but the first frame of an
        utterance, which decides first-audio latency: it is encoded right here (0.3 ms of loop
        time once per utterance; a hop to a worker thread under load took 8-26 ms, bench/load.py
        overhead probes). The encoder is this utterance's own and batches are sequential, so it
        is never used from two threads at once.
        """
        done = 0
        while done < len(pcm_frames):
            if utterance.frames_encoded == 0:
                batch = pcm_frames[done : done + 1]
                payloads = encoder.encode_many(batch)
            else:
                batch = pcm_frames[done : done + ENCODE_BATCH]
                payloads = await self.pool.run(encoder.encode_many, batch)
            done += len(batch)
            for payload in payloads:
                utterance.frames_encoded += 1
                if recorder is not None:
                    recorder.add(payload)
                await self._put(utterance, payload, index)
                index += 1
        return index

    async def _put(self, utterance: Utterance, payload: bytes, index: int) -> None:
        await self.frames.put(EncodedFrame(payload, utterance, index))
        if utterance.first_frame_queued_at is None:
            utterance.first_frame_queued_at = time.monotonic()

