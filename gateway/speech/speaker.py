"""The per-conversation speaker: turns utterances into encoded Opus frames, made once.

Data flows one way: text -> synthesizer (PCM, any rate) -> re-joined samples -> 24 kHz ->
20 ms frames -> Opus (encoded once) -> the ``FrameFanout`` -> every attached sink (the paced RTP
stream of a WebRTC leg, an HTTP stream ...). The sinks' bounded queues are the backpressure:
synthesis is read only as fast as the slowest blocking sink drains (media/fanout.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from gateway.media.fanout import FrameFanout
from gateway.media.framer import Framer, SampleAligner
from gateway.media.opus_codec import FRAME_SAMPLES, EncoderSettings, OpusFrameEncoder
from gateway.media.resample import RateFollower
from gateway.runtime import logs
from gateway.runtime.metrics import METRICS
from gateway.runtime.worker_pool import WorkerPool, encoder_pool
from gateway.speech.phrase import CachedPhrase, PhraseKey, PhraseRecorder
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.utterance import FINAL_STATES, Delivery, Utterance, UtteranceState
from gateway.text.timing import WordTiming, WordTrack
from gateway.tts.base import SynthesisError, Synthesizer, open_stream
from gateway.tts.synthesis_limits import limited_stream

log = logging.getLogger(__name__)

ENCODE_BATCH = 10  # frames per trip to the encoder threads (200 ms of audio)
# The first frames of an utterance are encoded on the loop (≈0.3 ms each): the first decides
# first-audio latency, and the next two give the first trip to the pool 40 ms (not 0-20 ms)
# before the stream needs its result -- on a busy machine the trip took longer than the first
# frame's slot, and a silent frame went out between frames one and two.
LOOP_FRAMES = 3

__all__ = ["ENCODE_BATCH", "FINAL_STATES", "Speaker", "SpeechQueueFull", "Utterance",
           "UtteranceState"]


class SpeechQueueFull(Exception):
    pass


class _Progress(Protocol):
    """What rendering stamps: an utterance, or a prerender."""

    first_pcm_at: float | None
    frames_encoded: int
    frames_rendered: int
    words: list[WordTiming]


class Speaker:
    """One session's speech: a bounded list of pending utterances and one producer task."""

    def __init__(
        self,
        frames: FrameFanout,
        settings: EncoderSettings,
        max_pending: int = 32,
        history: int = 64,
        cache: PhraseCache | None = None,
        pool: WorkerPool | None = None,
        encode: bool = True,
    ) -> None:
        """``encode=False``: hand the sinks the 24 kHz PCM frames the encoder would take
        (960 bytes of s16le per 20 ms) instead of Opus -- for outputs that are not Opus (an
        HTTP response in mp3, wav, ...); no encoder, no phrase cache."""
        self.frames = frames
        self.settings = settings
        self.encode = encode
        self.encoders_created = 0  # one per synthesized utterance (replays need none)
        self.pool: WorkerPool = pool or encoder_pool()
        self.cache = cache if encode and cache is not None and cache.enabled else None
        # Fully encoded utterances still playing out: stored in the cache once DONE.
        self._recordings: dict[Utterance, tuple[PhraseKey, PhraseRecorder]] = {}
        self.max_pending = max_pending
        self._pending: deque[tuple[Utterance, Synthesizer]] = deque()
        self._prerendered: dict[Utterance, Prerender] = {}  # say(..., prerendered=...)
        self._wakeup = asyncio.Event()
        self.idle = asyncio.Event()  # set while nothing is being produced or pending
        self.idle.set()
        self._current: Utterance | None = None
        self._current_task: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.recent: deque[Utterance] = deque(maxlen=history)
        self._by_id: dict[str, Utterance] = {}
        self.counts = dict.fromkeys((s.value for s in UtteranceState), 0)
        #: told of every utterance's state changes (the session's events)
        self.observer: Callable[[Utterance, UtteranceState], None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="speaker")

    def say(
        self,
        text: str,
        voice: Synthesizer,
        interrupt: bool = False,
        instructions: str | None = None,
        requested_at: float | None = None,
        prerendered: Prerender | None = None,
    ) -> Utterance:
        """``requested_at``: time.monotonic() when the request for it arrived (timelines).
        ``prerendered``: this text already rendered (``prerender``): its frames are played
        (the speaker owns it from here: it is cancelled if the utterance is cut)."""
        self.start()  # the producer task exists once there is something to say
        if interrupt:
            self.interrupt()
        if len(self._pending) >= self.max_pending:
            raise SpeechQueueFull(f"{self.max_pending} utterances are already waiting")
        utterance = Utterance(
            text=text, voice=voice.name, on_finish=self._on_final, instructions=instructions,
            observer=self.observer, requested_at=requested_at,
        )
        if self.observer is not None:
            self.observer(utterance, utterance.state)
        self._remember(utterance)
        self._pending.append((utterance, voice))
        if prerendered is not None:
            self._prerendered[utterance] = prerendered
        self.idle.clear()
        self._wakeup.set()
        return utterance

    def interrupt(self) -> int:
        """Stop what is playing and drop what is waiting, at once. Returns utterances cut."""
        cut = 0
        while self._pending:
            utterance, _ = self._pending.popleft()
            prerendered = self._prerendered.pop(utterance, None)
            if prerendered is not None:
                prerendered.cancel()
            self._finish(utterance, UtteranceState.INTERRUPTED)
            cut += 1
        if self._current_task is not None and not self._current_task.done():
            self._current_task.cancel()
        cut_off: dict[str, Utterance] = {}
        for owner in self.frames.clear():
            if isinstance(owner, Delivery):
                cut_off[owner.utterance.id] = owner.utterance
        if self._current is not None:
            cut_off[self._current.id] = self._current
        for utterance in cut_off.values():
            if utterance.state not in FINAL_STATES:
                self._finish(utterance, UtteranceState.INTERRUPTED)
                cut += 1
        return cut

    def get(self, utterance_id: str) -> Utterance | None:
        return self._by_id.get(utterance_id)

    def prerender(self, text: str, voice: Synthesizer,
                  instructions: str | None = None) -> Prerender:
        """Start rendering ``text`` now, to be played by a later ``say(...,
        prerendered=...)`` (or cancelled). A phrase cache hit is ready at once."""
        prerender = Prerender(text, voice.name, instructions)
        if self.cache is not None:
            phrase = self.cache.get(self._cache_key(voice, text, instructions))
            if phrase is not None:
                prerender.cached = True
                prerender.payloads = list(phrase.frames)
                prerender.finish()
                return prerender
        prerender.task = asyncio.create_task(self._prerender(prerender, voice),
                                             name="prerender")
        return prerender

    async def _prerender(self, prerender: Prerender, voice: Synthesizer) -> None:
        encoder = OpusFrameEncoder(self.settings) if self.encode else None
        if encoder is not None:
            self.encoders_created += 1
        rendered = self._render(prerender, voice, prerender.text, prerender.instructions,
                                encoder)
        try:
            async with contextlib.aclosing(rendered) as payloads:
                async for payload in payloads:
                    await prerender.add(payload)
        except SynthesisError as exc:
            prerender.finish(str(exc))
            return
        prerender.finish()

    async def wait_played(self) -> None:
        """Until nothing is pending or produced and the last utterance has finished playing."""
        await self.idle.wait()
        if self.recent and self.recent[-1].state not in FINAL_STATES:
            await self.recent[-1].finished.wait()

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def current(self) -> Utterance | None:
        return self._current

    async def close(self) -> None:
        self.interrupt()
        for prerendered in self._prerendered.values():
            prerendered.cancel()
        self._prerendered.clear()
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
        METRICS.utterances.labels(utterance.state.value).inc()
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
    def _cache_key(self, voice: Synthesizer, text: str, instructions: str | None) -> PhraseKey:
        assert self.cache is not None
        voice_key = voice.name
        if instructions and getattr(voice, "takes_instructions", False):
            voice_key = f"{voice.name}\0{instructions}"  # another rendering
        return self.cache.key(voice_key, text, self.settings)

    async def _produce(self, utterance: Utterance, voice: Synthesizer) -> None:
        logs.bind(utterance=utterance.id)  # this task's log lines name their utterance
        utterance.started_at = time.monotonic()
        utterance.set_state(UtteranceState.SYNTHESIZING)
        prerendered = self._prerendered.pop(utterance, None)
        if prerendered is not None:
            try:
                if prerendered.matches(utterance.text, voice.name, utterance.instructions):
                    await self._play_prerendered(utterance, prerendered)
                    return
            finally:
                prerendered.cancel()
        key: PhraseKey | None = None
        recorder: PhraseRecorder | None = None
        if self.cache is not None and getattr(voice, "cacheable", True):
            key = self._cache_key(voice, utterance.text, utterance.instructions)
            phrase = self.cache.get(key)
            if phrase is not None:
                await self._replay(utterance, phrase)
                return
            recorder = self.cache.recorder()
        # A fresh encoder per synthesized utterance: no session holds libopus state (≈43 KB)
        # while idle or replaying, and a barge-in never waits for the lock of an encoder a
        # cancelled batch may still be using on a worker thread (73 µs to make one here).
        encoder: OpusFrameEncoder | None = None
        if self.encode:
            encoder = OpusFrameEncoder(self.settings)
            self.encoders_created += 1
        rendered = self._render(utterance, voice, utterance.text, utterance.instructions,
                                encoder)
        async with contextlib.aclosing(rendered) as payloads:
            index = await self._queue_all(
                utterance, payloads, None if recorder is None else recorder.add
            )
        if index is None:
            return
        if key is not None and recorder is not None:
            self._recordings[utterance] = (key, recorder)
        self._all_queued(utterance, index)

    async def _queue_all(self, utterance: Utterance, payloads: AsyncIterator[bytes],
                         each: Callable[[bytes], None] | None = None) -> int | None:
        """Queue ``payloads`` as they come (``each`` told of every one first); how many, or
        None when synthesis failed (the utterance has ended FAILED)."""
        index = 0
        try:
            async for payload in payloads:
                if each is not None:
                    each(payload)
                await self._put(utterance, payload, index)
                index += 1
        except SynthesisError as exc:
            log.warning("utterance %s: %s", utterance.id, exc)
            self._finish(utterance, UtteranceState.FAILED, str(exc))
            return None
        return index

    async def _play_prerendered(self, utterance: Utterance, prerendered: Prerender) -> None:
        """Frames rendered before the ``say``: queued as they are (or as they come)."""
        utterance.cached = prerendered.cached
        utterance.frames_rendered = prerendered.frames_rendered
        utterance.started_at = min(utterance.started_at or prerendered.started_at,
                                   prerendered.started_at)
        def first_pcm(_: bytes) -> None:
            if utterance.first_pcm_at is None:
                utterance.first_pcm_at = prerendered.first_pcm_at

        index = await self._queue_all(utterance, prerendered.frames(), first_pcm)
        if index is None:
            return
        utterance.frames_encoded = prerendered.frames_encoded
        utterance.words = prerendered.words
        self._all_queued(utterance, index)

    async def _render(self, progress: _Progress, voice: Synthesizer, text: str,
                      instructions: str | None,
                      encoder: OpusFrameEncoder | None) -> AsyncIterator[bytes]:
        """text -> the voice's PCM (any rate) -> 24 kHz 20 ms frames -> Opus payloads (the
        PCM frames themselves without an encoder), in order; raises ``SynthesisError``."""
        aligner = SampleAligner()
        framer = Framer(FRAME_SAMPLES)
        resampler = RateFollower()
        track = WordTrack(text)  # the words' times travel with the PCM
        progress.words = track.words  # live: each chunk's words as soon as it arrives
        started = time.monotonic()
        stream = limited_stream(open_stream(voice, text, instructions), text)
        async with contextlib.aclosing(stream) as chunks:
            async for chunk in chunks:
                if progress.first_pcm_at is None:
                    progress.first_pcm_at = time.monotonic()
                    METRICS.tts_first_chunk.labels(type(voice).__name__).observe(
                        progress.first_pcm_at - started
                    )
                source = aligner.push(chunk.data)
                track.add(source, chunk.sample_rate, chunk.words)
                samples = resampler.push(source, chunk.sample_rate)
                frames = framer.push(samples)
                progress.frames_rendered += len(frames)  # the clause's length, as known
                async for payload in self._encode(progress, encoder, frames):
                    yield payload
        progress.words = track.finish()
        tail = resampler.flush()
        frames = (framer.push(tail) if tail.size else []) + framer.flush()
        progress.frames_rendered += len(frames)
        async for payload in self._encode(progress, encoder, frames):
            yield payload

    async def _replay(self, utterance: Utterance, phrase: CachedPhrase) -> None:
        """A phrase cache hit: its packets go straight to the queue, still paced by it."""
        utterance.cached = True
        frames = phrase.frames
        if frames:
            utterance.first_frame_queued_at = time.monotonic()
            await self.frames.extend(frames[:1], utterance)
            await self.frames.extend(frames, utterance, first_index=1, start=1)  # no copy
        self._all_queued(utterance, len(frames))

    @staticmethod
    def _all_queued(utterance: Utterance, count: int) -> None:
        utterance.all_queued(count)  # DONE once every sink has sent what it got

    async def _encode(
        self,
        progress: _Progress,
        encoder: OpusFrameEncoder | None,
        pcm_frames: list[bytes],
    ) -> AsyncIterator[bytes]:
        """Encode frames, each yielded (to be queued) before the next batch is encoded.

        A 24 kHz hybrid Opus frame costs ≈0.3 ms of CPU at complexity 9: on the loop thread that
        would delay every stream's pacing, so frames are encoded on the encoder pool in batches
        of up to ENCODE_BATCH, one thread hop per batch -- all but the first LOOP_FRAMES of an
        utterance: the first decides first-audio latency, and it and the next two are encoded
        right here (≈1 ms of loop time once per utterance; a hop to a worker thread under load
        took 8-26 ms, bench/load.py overhead probes), so the first hop has 40 ms to return.
        The encoder is this utterance's own and batches are sequential, so it is never used
        from two threads at once.
        """
        if encoder is None:  # PCM out: the frames themselves
            for pcm in pcm_frames:
                yield pcm
            return
        done = 0
        while done < len(pcm_frames):
            if progress.frames_encoded < LOOP_FRAMES:
                # the first alone (queued before the next is encoded), then the rest of them
                encoded = progress.frames_encoded
                room = 1 if encoded == 0 else LOOP_FRAMES - encoded
                batch = pcm_frames[done : done + room]
                payloads = encoder.encode_many(batch)
            else:
                batch = pcm_frames[done : done + ENCODE_BATCH]
                payloads = await self.pool.run(encoder.encode_many, batch)
            done += len(batch)
            for payload in payloads:
                progress.frames_encoded += 1
                yield payload

    async def _put(self, utterance: Utterance, payload: bytes, index: int) -> None:
        if utterance.first_frame_queued_at is None:  # handed over (a sink may send it at once)
            utterance.first_frame_queued_at = time.monotonic()
        await self.frames.extend((payload,), utterance, index)

