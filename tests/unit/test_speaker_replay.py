"""A phrase-cache hit is replayed with no task: its packets are handed to the sinks as their
queues drain (``FrameFanout.feed``). The same frames in the same order, the same states and
end states as a task's replay, interrupts and ``close`` cut it, and nothing keeps the speaker
alive once it has ended (no reference cycle: freed by refcounting)."""

from __future__ import annotations

import asyncio
import gc
import itertools
import weakref

from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.speech.phrase import CachedPhrase
from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.speaker import Speaker, UtteranceState
from gateway.speech.utterance import Delivery, Utterance
from gateway.tts.tone import ToneSynthesizer
from tests.pipeline import InlinePool, pipeline

TONE = ToneSynthesizer(seconds=0.2)  # 10 frames when synthesized (not cached)


def cached_pipeline(**options: object) -> tuple[Speaker, FrameQueue, PhraseCache]:
    cache = PhraseCache(1 << 20)
    speaker, track = pipeline(pool=InlinePool(), cache=cache, **options)  # type: ignore[arg-type]
    return speaker, track.sink.queue, cache


def cache_phrase(speaker: Speaker, cache: PhraseCache, text: str, frames: int,
                 tag: int = 0) -> list[bytes]:
    payloads = [bytes([tag, i & 0xFF]) * 20 for i in range(frames)]
    cache.put(cache.key(TONE.name, text, speaker.settings), CachedPhrase.from_payloads(payloads))
    return payloads


def utterance_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("utterance-")]


async def play(queue: FrameQueue, until, seqs=None) -> list[tuple[str, bytes]]:  # type: ignore[no-untyped-def]
    """Pop frames until ``until()``: (utterance id, payload) in the order sent."""
    seqs = seqs or itertools.count()
    sent: list[tuple[str, bytes]] = []
    while not until():
        fields = queue.pop_fields()
        if fields is None:
            await asyncio.sleep(0)
            continue
        payload, owner, index = fields
        if isinstance(owner, Delivery):
            owner.on_frame_sent(index, next(seqs) & 0xFFFF, 0, 0.0)
            sent.append((owner.utterance.id, payload))
    return sent


def observe(speaker: Speaker) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    speaker.observer = lambda u, state: seen.append((u.id, state.value))
    return seen


async def test_a_hit_longer_than_the_queue_plays_in_order_with_no_task() -> None:
    speaker, queue, cache = cached_pipeline()
    payloads = cache_phrase(speaker, cache, "hello", 120)  # the queue holds 50
    seen = observe(speaker)
    try:
        u = speaker.say("hello", TONE)
        await asyncio.sleep(0)
        assert speaker.current is u and utterance_tasks() == []
        assert len(queue) == 50 and u.state is UtteranceState.SYNTHESIZING and u.cached
        sent = await play(queue, lambda: u.state is UtteranceState.DONE)
        assert [p for _, p in sent] == payloads
        assert utterance_tasks() == [] and queue.producer_waits >= 2
        await asyncio.wait_for(speaker.idle.wait(), 1)
        await asyncio.sleep(0)
        assert [s for _, s in seen] == ["queued", "synthesizing", "playing", "done"]
        assert speaker.counts["done"] == 1 and cache.hits == 1 and u.text == ""
        assert u.total_frames == 120 and u.deliveries["rtp"].frames == 120
    finally:
        await speaker.close()


async def test_hits_and_a_synthesized_utterance_play_back_to_back_in_order() -> None:
    speaker, queue, cache = cached_pipeline()
    cache_phrase(speaker, cache, "one", 70, tag=1)
    cache_phrase(speaker, cache, "three", 5, tag=3)
    try:
        said = [speaker.say(text, TONE) for text in ("one", "two", "three")]
        sent = await play(queue, lambda: all(u.state is UtteranceState.DONE for u in said))
        assert list(dict.fromkeys(i for i, _ in sent)) == [u.id for u in said]
        assert len(sent) == 70 + 10 + 5
        assert [u.cached for u in said] == [True, False, True]
        await asyncio.sleep(0)  # on_finish: from the loop
        assert cache.hits == 2 and speaker.counts["done"] == 3
    finally:
        await speaker.close()


async def test_a_hit_reaches_every_sink_block_and_drop() -> None:
    speaker, queue, cache = cached_pipeline()
    http = FrameQueue(10)
    port = speaker.frames.attach("http", http, SinkPolicy.DROP)
    payloads = cache_phrase(speaker, cache, "hello", 60)
    try:
        u = speaker.say("hello", TONE)
        got_http: list[bytes] = []

        async def drain_http() -> None:
            while u.state is not UtteranceState.DONE:
                got_http.extend(p for _, p in await play(http, lambda: len(http) == 0))
                await asyncio.sleep(0)

        reader = asyncio.create_task(drain_http())
        sent = await play(queue, lambda: u.deliveries.get("rtp") is not None
                          and u.deliveries["rtp"].frames == 60)
        await asyncio.wait_for(reader, 1)
        assert [p for _, p in sent] == payloads
        assert len(got_http) + port.dropped == 60 and port.frames_in == 60
        assert u.deliveries["http"].skipped == port.dropped
    finally:
        await speaker.close()


async def test_an_interrupt_cuts_the_replay_in_order_and_the_next_say_plays() -> None:
    speaker, queue, cache = cached_pipeline()
    cache_phrase(speaker, cache, "short", 5, tag=1)
    cache_phrase(speaker, cache, "long", 200, tag=2)
    seen = observe(speaker)
    try:
        short = speaker.say("short", TONE)
        long = speaker.say("long", TONE)
        waiting = speaker.say("short", TONE)
        await play(queue, lambda: short.frames_sent >= 1)
        for _ in range(5):  # long is replayed once short has ended: no pop meanwhile
            await asyncio.sleep(0)
        assert speaker.current is long and queue._on_space is not None  # long waits for room
        cut_in = speaker.say("short", TONE, interrupt=True)
        assert queue._on_space is None and len(queue) == 0  # the replay let go of the queue
        assert short.state is long.state is waiting.state is UtteranceState.INTERRUPTED
        sent = await play(queue, lambda: cut_in.state is UtteranceState.DONE)
        assert {i for i, _ in sent} == {cut_in.id} and len(sent) == 5
        await asyncio.sleep(0)
        cut = [i for i, s in seen if s == "interrupted"]
        assert cut == [waiting.id, short.id, long.id]  # the waiting, then as queued
        assert long.text == "" and utterance_tasks() == []
    finally:
        await speaker.close()


async def test_close_cuts_the_replay_and_leaves_no_cycle() -> None:
    speaker, queue, cache = cached_pipeline()
    cache_phrase(speaker, cache, "long", 200)
    u = speaker.say("long", TONE)
    await play(queue, lambda: u.frames_sent >= 3)
    await speaker.close()
    assert u.state is UtteranceState.INTERRUPTED and speaker.current is None
    assert queue._on_space is None
    late = speaker.say("long", TONE)
    for _ in range(5):
        await asyncio.sleep(0)
    assert late.state is UtteranceState.QUEUED and queue.pop() is None
    gc.collect()
    gc.disable()
    try:
        ref = weakref.ref(speaker)
        del speaker
        await asyncio.sleep(0)
        assert ref() is None  # freed by refcounting: no cycle through the replay
    finally:
        gc.enable()


async def test_a_finished_replay_leaves_no_cycle() -> None:
    speaker, queue, cache = cached_pipeline()
    cache_phrase(speaker, cache, "hello", 80)
    u: Utterance = speaker.say("hello", TONE)
    await play(queue, lambda: u.state is UtteranceState.DONE)
    await asyncio.wait_for(speaker.idle.wait(), 1)
    gc.collect()
    gc.disable()
    try:
        ref = weakref.ref(speaker)
        del speaker
        await asyncio.sleep(0)
        assert ref() is None
    finally:
        gc.enable()
