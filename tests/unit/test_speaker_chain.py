"""The speaker's utterances, each produced by its own task, the next started when the previous
one ends (no producer loop task): played in order, one failing or cut does not stop the next,
nothing is produced after ``close``, and no task is left once everything has played."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

from gateway.speech.speaker import Speaker, UtteranceState
from gateway.speech.utterance import Delivery
from gateway.tts.base import PcmChunk
from gateway.tts.tone import ToneSynthesizer
from tests.pipeline import InlinePool, pipeline


class Broken:
    """A voice whose stream fails with an error that is not a ``SynthesisError``."""

    name = "broken"

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        raise RuntimeError("boom")
        yield PcmChunk(b"", 24_000)  # pragma: no cover - makes this an async generator

    async def close(self) -> None:
        return None


def utterance_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("utterance-")]


async def play_all(speaker: Speaker, queue, until) -> list[str]:  # type: ignore[no-untyped-def]
    """Pop frames until ``until()``; the utterance ids of the frames, in the order sent."""
    order: list[str] = []
    seqs = itertools.count()
    while not until():
        frame = queue.pop()
        if frame is None:
            await asyncio.sleep(0)
            continue
        if isinstance(frame.owner, Delivery):
            frame.owner.on_frame_sent(frame.index, next(seqs) & 0xFFFF, 0, 0.0)
            order.append(frame.owner.utterance.id)
    return order


async def test_utterances_said_back_to_back_play_in_order_and_leave_no_task() -> None:
    speaker, track = pipeline(pool=InlinePool())
    tone = ToneSynthesizer(seconds=0.2)  # 10 frames each
    try:
        said = [speaker.say(text, tone) for text in ("one", "two", "three")]
        assert speaker.pending == 3  # produced from the next loop turn on
        order = await play_all(speaker, track.sink.queue,
                               lambda: all(u.state is UtteranceState.DONE for u in said))
        assert list(dict.fromkeys(order)) == [u.id for u in said]
        assert len(order) == 30
        await asyncio.wait_for(speaker.idle.wait(), 1)
        assert speaker.current is None and speaker.pending == 0
        assert utterance_tasks() == []
        assert speaker.counts["queued"] == 3 and speaker.counts["done"] == 3
        assert all(u.text == "" for u in said)  # let go once produced
    finally:
        await speaker.close()


async def test_a_failing_utterance_ends_failed_and_the_next_one_plays() -> None:
    speaker, track = pipeline(pool=InlinePool())
    try:
        broken = speaker.say("one", Broken())  # type: ignore[arg-type]
        after = speaker.say("two", ToneSynthesizer(seconds=0.2))
        order = await play_all(speaker, track.sink.queue,
                               lambda: after.state is UtteranceState.DONE)
        assert broken.state is UtteranceState.FAILED and "boom" in (broken.error or "")
        assert set(order) == {after.id}
        assert speaker.counts["failed"] == 1
    finally:
        await speaker.close()


async def test_an_interrupting_say_plays_once_the_cut_utterance_has_ended() -> None:
    speaker, track = pipeline(pool=InlinePool())
    tone = ToneSynthesizer(seconds=2.0)  # more than the queue holds: its task waits on it
    queue = track.sink.queue
    try:
        first = speaker.say("one", tone)
        waiting = speaker.say("two", tone)
        await play_all(speaker, queue, lambda: first.frames_sent >= 3)
        assert speaker.current is first and len(utterance_tasks()) == 1
        cut_in = speaker.say("three", ToneSynthesizer(seconds=0.2), interrupt=True)
        assert first.state is UtteranceState.INTERRUPTED
        assert waiting.state is UtteranceState.INTERRUPTED
        order = await play_all(speaker, queue, lambda: cut_in.state is UtteranceState.DONE)
        assert set(order) == {cut_in.id} and len(order) == 10
        await asyncio.wait_for(speaker.idle.wait(), 1)
        assert utterance_tasks() == []
    finally:
        await speaker.close()


async def test_close_ends_the_current_task_and_nothing_is_produced_after_it() -> None:
    speaker, track = pipeline(pool=InlinePool())
    tone = ToneSynthesizer(seconds=2.0)
    first = speaker.say("one", tone)
    await play_all(speaker, track.sink.queue, lambda: first.frames_sent >= 1)
    await speaker.close()
    assert first.state is UtteranceState.INTERRUPTED and utterance_tasks() == []
    late = speaker.say("two", tone)
    for _ in range(5):
        await asyncio.sleep(0)
    assert late.state is UtteranceState.QUEUED and speaker.pending == 1
    assert utterance_tasks() == [] and track.sink.queue.pop() is None


async def test_recent_keeps_the_last_history_utterances() -> None:
    speaker, _ = pipeline(pool=InlinePool(), history=2)
    tone = ToneSynthesizer(seconds=0.2)
    try:
        said = [speaker.say(text, tone) for text in ("one", "two", "three")]
        assert speaker.recent == said[1:]
        assert speaker.get(said[0].id) is None and speaker.get(said[2].id) is said[2]
    finally:
        await speaker.close()
