"""The per-conversation speaker: the queue of utterances, their order and their interrupts.

Utterances wait in a bounded list and are produced one at a time, in order, each by its own
task, the next started when the previous one ends (no task waits between them): each from a
prerender, a phrase cache hit, or rendered now (``render.py``: text -> synthesizer -> 24 kHz
20 ms frames -> Opus, encoded once) -> the ``FrameFanout`` -> every attached sink (the paced RTP
stream of a WebRTC leg, an HTTP stream ...). The sinks' bounded queues are the
backpressure: synthesis is read only as fast as the slowest blocking sink drains
(media/fanout.py). ``interrupt`` cuts what plays and drops what waits, at once.

What a speaking session keeps is sized for thousands of them (issue 28: ≤ 100 KB of RSS a
session): no producer loop task, which with its ``asyncio.wait`` per utterance (a set, a future,
a callback closure, two coroutine frames) was 1.9 KB of a speaking session's heap; lists, not
deques, for the pending and recent utterances (an empty deque is a 624-byte block); the state
counts in a list of six ints (bench/session_memory.py --speaking). A phrase-cache hit -- every
repeated reply -- has no task at all: a ``_Replay`` hands its cached packets to the fan-out as
the sinks' queues drain (``FrameFanout.feed``), where a task waiting on the full queue for the
whole utterance held its coroutine chain, the task and its context (≈ 2 KB).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import cast

from gateway.media.fanout import FanoutFeed, FrameFanout
from gateway.media.opus_codec import EncoderSettings
from gateway.runtime import logs
from gateway.runtime.lazy_event import LazyEvent
from gateway.runtime.metrics import METRICS
from gateway.runtime.worker_pool import WorkerPool, encoder_pool
from gateway.speech.phrase import CachedPhrase, PhraseKey, PhraseRecorder
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.prerender import Prerender
from gateway.speech.render import ENCODE_BATCH, FrameRenderer
from gateway.speech.utterance import FINAL_STATES, Delivery, Utterance, UtteranceState
from gateway.tts.base import SynthesisError, Synthesizer

log = logging.getLogger(__name__)

__all__ = ["ENCODE_BATCH", "FINAL_STATES", "Speaker", "SpeechQueueFull", "Utterance",
           "UtteranceState"]


class SpeechQueueFull(Exception):
    pass


_STATES = tuple(UtteranceState)
_STATE_INDEX = {state: i for i, state in enumerate(_STATES)}


class Speaker:
    """One session's speech: a bounded list of pending utterances, produced one at a time (by a
    task each, or a ``_Replay`` for a phrase-cache hit)."""

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
        self.renderer = FrameRenderer(settings, pool or encoder_pool(), encode)
        self.cache = cache if encode and cache is not None and cache.enabled else None
        # Fully encoded utterances still playing out: stored in the cache once DONE.
        self._recordings: dict[Utterance, tuple[PhraseKey, PhraseRecorder]] = {}
        self._counts = [0] * len(_STATES)
        #: every utterance's ``on_finish``: one object, not a bound method per utterance
        self._on_final = _Finals(self._counts, self._recordings, self.cache)
        self.max_pending = max_pending
        #: the utterances waiting, oldest first, each followed by its voice: [utterance, voice,
        #: utterance, voice, ...] (a tuple per utterance was 56 bytes)
        self._pending: list[Utterance | Synthesizer] = []
        self._prerendered: dict[Utterance, Prerender] = {}  # say(..., prerendered=...)
        self.idle = LazyEvent()  # set while nothing is being produced or pending
        self.idle.set()
        self._current: Utterance | None = None
        #: what produces ``_current``: its task, or a phrase-cache replay (no task)
        self._current_task: asyncio.Task[None] | _Replay | None = None
        #: what the utterances' tasks run in (their log lines' session): a copy of the context
        #: of the first ``start`` (or ``say``), each task a copy of it
        self._context: contextvars.Context | None = None
        self._next_due = False  # a call to ``_next`` is scheduled
        self._closed = False
        #: the last ``history`` utterances, oldest first
        self.recent: list[Utterance] = []
        self._history = history
        self._by_id: dict[str, Utterance] = {}
        #: told of every utterance's state changes (the session's events)
        self.observer: Callable[[Utterance, UtteranceState], None] | None = None

    @property
    def encoders_created(self) -> int:
        """Encoders made: one per synthesized utterance or prerender (replays need none)."""
        return self.renderer.encoders_created

    @property
    def counts(self) -> dict[str, int]:
        """Utterances by state: queued (every one said), then those that ended in each."""
        return {state.value: n for state, n in zip(_STATES, self._counts, strict=True)}

    def start(self) -> None:
        """Take the caller's context for the utterances' tasks (the first call only: ``say``
        calls it too)."""
        if self._context is None:
            self._context = contextvars.copy_context()

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
        self.start()
        if interrupt:
            self.interrupt()
        if len(self._pending) >= 2 * self.max_pending:
            raise SpeechQueueFull(f"{self.max_pending} utterances are already waiting")
        utterance = Utterance(
            text=text, voice=voice.name, on_finish=self._on_final, instructions=instructions,
            observer=self.observer, requested_at=requested_at,
        )
        if self.observer is not None:
            self.observer(utterance, utterance.state)
        self._remember(utterance)
        self._pending += (utterance, voice)
        if prerendered is not None:
            self._prerendered[utterance] = prerendered
        self.idle.clear()
        if not self._next_due and self._current_task is None and not self._closed:
            # produced from the next loop iteration on (so a ``say`` sees it pending, as one
            # after it does while this one plays)
            self._next_due = True
            asyncio.get_running_loop().call_soon(self._next, context=self._context)
        return utterance

    def interrupt(self) -> int:
        """Stop what is playing and drop what is waiting, at once. Returns utterances cut."""
        cut = 0
        while self._pending:
            utterance, _ = self._pop_pending()
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
        prerender.task = asyncio.create_task(self.renderer.fill(prerender, voice),
                                             name="prerender")
        return prerender

    async def wait_played(self) -> None:
        """Until nothing is pending or produced and the last utterance has finished playing."""
        await self.idle.wait()
        if self.recent and self.recent[-1].state not in FINAL_STATES:
            await self.recent[-1].finished.wait()

    @property
    def pending(self) -> int:
        return len(self._pending) // 2

    def waiting(self) -> list[Utterance]:
        """The utterances waiting to be produced, oldest first."""
        return cast(list[Utterance], self._pending[::2])

    @property
    def current(self) -> Utterance | None:
        return self._current

    async def close(self) -> None:
        """Cut everything; no utterance is produced after this (a later ``say`` stays
        pending). Returns once the current utterance's task has ended."""
        self._closed = True
        self.interrupt()
        for prerendered in self._prerendered.values():
            prerendered.cancel()
        self._prerendered.clear()
        task = self._current_task
        if isinstance(task, _Replay):
            task.cancel()
            self._replayed(task)  # at once, as a task's end is awaited below
        elif task is not None:
            task.cancel()
            await asyncio.wait({task})  # its end is ``_produced``'s to report

    # --- internals -----------------------------------------------------------------------------

    def _pop_pending(self) -> tuple[Utterance, Synthesizer]:
        """The oldest waiting utterance and its voice, taken off the list."""
        utterance = self._pending.pop(0)
        voice = self._pending.pop(0)
        return cast(Utterance, utterance), cast(Synthesizer, voice)

    def _remember(self, utterance: Utterance) -> None:
        recent = self.recent
        if recent and len(recent) >= self._history:
            self._by_id.pop(recent.pop(0).id, None)
        recent.append(utterance)
        self._by_id[utterance.id] = utterance
        self._counts[_STATE_INDEX[UtteranceState.QUEUED]] += 1

    @staticmethod
    def _finish(utterance: Utterance, state: UtteranceState, error: str | None = None) -> None:
        utterance.finish(state, error)

    def _next(self) -> None:
        """Start producing the next pending utterance, if none is being produced: by its task
        (``_current_task``, cancelled by ``interrupt``), or, for a phrase-cache hit, by a
        ``_Replay`` (no task); its end starts the next one."""
        self._next_due = False
        if self._current_task is not None or self._closed:
            return
        if not self._pending:
            self.idle.set()
            return
        self.idle.clear()
        utterance, voice = self._pop_pending()
        self._current = utterance
        context = self._context
        key: PhraseKey | None = None
        if (self.cache is not None and utterance not in self._prerendered
                and getattr(voice, "cacheable", True)):
            key = self._cache_key(voice, utterance.text, utterance.instructions)
            phrase = self.cache.get(key)
            if phrase is not None:
                replay = _Replay(self, utterance, phrase.frames)
                self._current_task = replay
                # in a copy of the context, as the task's would be (its log lines)
                (contextvars.copy_context() if context is None else context.copy()).run(
                    replay.start)
                return
        task = asyncio.get_running_loop().create_task(
            self._produce(utterance, voice, key), name=f"utterance-{utterance.id}",
            context=None if context is None else context.copy(),
        )
        self._current_task = task
        task.add_done_callback(self._produced, context=context)

    def _produced(self, task: asyncio.Task[None]) -> None:
        """The current utterance's task has ended (done, failed, or cut): on to the next."""
        error = None if task.cancelled() else task.exception()
        self._ended(error)

    def _replayed(self, replay: _Replay) -> None:
        """The current utterance's replay has ended (all queued, failed, or cut): on to the
        next. Called once the replay ended (``call_soon``, as a task's done callback is) and
        by ``close``: the later call finds another current and does nothing."""
        if self._current_task is replay:
            self._ended(replay.error)

    def _ended(self, error: BaseException | None) -> None:
        utterance = self._current
        self._current = None
        self._current_task = None
        if utterance is None:  # not reached: ``_current`` is only cleared here
            return
        if error is not None:
            log.error("utterance %s failed: %r", utterance.id, error)
            self._finish(utterance, UtteranceState.FAILED, f"internal error: {error!r}")
        # Fully queued (or cut): the text is not needed again, and up to ``history`` finished
        # utterances stay listed per session.
        utterance.text = ""
        if utterance.total_frames is None:  # cancelled before synthesis ended
            self._finish(utterance, UtteranceState.INTERRUPTED)
        # Otherwise it is fully queued and becomes DONE when its last frame is sent.
        self._next()

    def _cache_key(self, voice: Synthesizer, text: str, instructions: str | None) -> PhraseKey:
        assert self.cache is not None
        voice_key = voice.name
        if instructions and getattr(voice, "takes_instructions", False):
            voice_key = f"{voice.name}\0{instructions}"  # another rendering
        return self.cache.key(voice_key, text, self.settings)

    async def _produce(self, utterance: Utterance, voice: Synthesizer,
                       key: PhraseKey | None = None) -> None:
        """Synthesize (or play the prerender of) ``utterance``. ``key``: ``_next`` looked it
        up in the phrase cache and missed (record it under ``key``); None: not looked up yet
        (a prerender was there) or not cacheable."""
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
        recorder: PhraseRecorder | None = None
        if self.cache is not None and getattr(voice, "cacheable", True):
            if key is None:  # a prerender that did not match: look it up now
                key = self._cache_key(voice, utterance.text, utterance.instructions)
                phrase = self.cache.get(key)
                if phrase is not None:
                    await self._replay(utterance, phrase)
                    return
            recorder = self.cache.recorder()
        rendered = self.renderer.render(utterance, voice, utterance.text,
                                        utterance.instructions, self.renderer.encoder())
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

    async def _replay(self, utterance: Utterance, phrase: CachedPhrase) -> None:
        """A phrase cache hit found by the task (a prerender that did not match): its packets
        go straight to the queue, still paced by it. (Found by ``_next``: ``_Replay``.)"""
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

    async def _put(self, utterance: Utterance, payload: bytes, index: int) -> None:
        if utterance.first_frame_queued_at is None:  # handed over (a sink may send it at once)
            utterance.first_frame_queued_at = time.monotonic()
        await self.frames.extend((payload,), utterance, index)



class _Finals:
    """Told of each utterance's final state (its ``on_finish``): counts it, and stores a
    complete recording in the phrase cache. One per speaker, holding what that needs and not
    the speaker: a bound method per utterance was 64 bytes each (a session lists up to
    ``history`` of them), and one bound method kept on the speaker would be a speaker ->
    method -> speaker cycle (freed only by a full collection)."""

    __slots__ = ("cache", "counts", "recordings")

    def __init__(self, counts: list[int],
                 recordings: dict[Utterance, tuple[PhraseKey, PhraseRecorder]],
                 cache: PhraseCache | None) -> None:
        self.counts = counts
        self.recordings = recordings
        self.cache = cache

    def __call__(self, utterance: Utterance) -> None:
        self.counts[_STATE_INDEX[utterance.state]] += 1
        METRICS.utterances.labels(utterance.state.value).inc()
        recording = self.recordings.pop(utterance, None)
        if recording is not None and self.cache is not None:
            if utterance.state is UtteranceState.DONE:  # complete, not cut, not failed
                self.cache.put_recording(*recording)


class _Replay:
    """A phrase-cache hit being queued, in place of a task: its cached packets handed to the
    fan-out as ``Speaker._replay`` does -- the first frame to every sink, then the rest --
    each step fed by the sinks' queues as they drain (``FrameFanout.feed``). What it holds
    while the queue is full: this, the feed, a bound method in the queue (≈ 0.3 KB against
    ≈ 2 KB for a task waiting in ``extend``). Its end (all queued, a failure, or ``cancel``)
    is reported to the speaker with ``call_soon``, as a task's done callback would be;
    the speaker drops it then (it refers to the speaker only until it is current no more)."""

    __slots__ = ("_feed", "_frames", "_speaker", "_utterance", "error")

    def __init__(self, speaker: Speaker, utterance: Utterance, frames: Sequence[bytes]) -> None:
        self._speaker: Speaker | None = speaker
        self._utterance = utterance
        self._frames = frames
        self._feed: FanoutFeed | None = None
        self.error: BaseException | None = None  # why it failed (``internal error``)

    def done(self) -> bool:
        """Ended: all queued, failed, or cancelled (as ``Task.done``)."""
        return self._speaker is None

    def start(self) -> None:
        """As ``Speaker._produce`` up to ``_replay``, then the first frame to every sink."""
        utterance = self._utterance
        try:
            logs.bind(utterance=utterance.id)
            utterance.started_at = time.monotonic()
            utterance.set_state(UtteranceState.SYNTHESIZING)
            utterance.cached = True
            frames = self._frames
            if not frames:
                self._fed_all(None)
                return
            utterance.first_frame_queued_at = time.monotonic()
            self._hand(frames[:1], 0, self._fed_first)
        except Exception as exc:  # as a task's exception would end it: FAILED
            self.error = exc
            self._end()

    def cancel(self) -> bool:
        """Cut it (``interrupt``): nothing more is queued; the speaker is told soon."""
        if self._speaker is None:
            return False
        if self._feed is not None:
            self._feed.cancel()
        self._end()
        return True

    def _hand(self, payloads: Sequence[bytes], start: int,
              then: Callable[[BaseException | None], None]) -> None:
        assert self._speaker is not None
        self._feed = None
        feed = self._speaker.frames.feed(payloads, self._utterance, start, then, start)
        if not feed.ended:
            self._feed = feed

    def _fed_first(self, error: BaseException | None) -> None:
        if error is not None:
            self.error = error
            self._end()
            return
        self._hand(self._frames, 1, self._fed_all)  # no copy: from index 1 on

    def _fed_all(self, error: BaseException | None) -> None:
        if error is not None:
            self.error = error
        else:
            self._utterance.all_queued(len(self._frames))  # DONE once every sink sent it
        self._end()

    def _end(self) -> None:
        speaker = self._speaker
        if speaker is None:
            return
        self._speaker = None
        self._feed = None
        asyncio.get_running_loop().call_soon(speaker._replayed, self, context=speaker._context)
