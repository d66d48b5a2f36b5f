"""A clause rendered ahead of its ``say`` (``Speaker.prerender``): played as rendered, the same
packets a plain ``say`` makes; dropped when cut or when the text said is another."""

from __future__ import annotations

import asyncio
import itertools

from gateway.speech.speaker import UtteranceState
from gateway.tts.tone import ToneSynthesizer
from tests.pipeline import InlinePool, pipeline, play_out


async def test_a_prerendered_clause_plays_the_packets_a_plain_say_makes():
    seqs = itertools.count()
    speaker, track = pipeline(pool=InlinePool())
    queue, store = track.sink.queue, track.sink.store
    tone = ToneSynthesizer(seconds=0.5)
    try:
        plain = speaker.say("hello", tone)
        expected = await play_out(queue, store, plain, seqs)
        await speaker.idle.wait()
        prerender = speaker.prerender("hello", tone)
        await prerender.task  # rendered before anyone says it
        assert prerender.done and len(prerender.payloads) == 25 and queue.pop() is None
        encoders = speaker.encoders_created
        said = speaker.say("hello", tone, prerendered=prerender)
        assert await play_out(queue, store, said, seqs) == expected
        await speaker.idle.wait()
        assert said.state is UtteranceState.DONE and said.frames_sent == 25
        assert said.frames_encoded == 25 and said.first_pcm_at is not None
        assert speaker.encoders_created == encoders  # nothing encoded again
        assert prerender.payloads == []  # let go once played
    finally:
        await speaker.close()


async def test_a_prerender_still_rendering_is_played_as_it_comes():
    seqs = itertools.count()
    speaker, track = pipeline(pool=InlinePool())
    tone = ToneSynthesizer(seconds=0.5)
    try:
        prerender = speaker.prerender("hello", tone)
        said = speaker.say("hello", tone, prerendered=prerender)  # at once: nothing made yet
        sent = await play_out(track.sink.queue, track.sink.store, said, seqs)
        assert len(sent) == 25 and said.state is UtteranceState.DONE
    finally:
        await speaker.close()


async def test_a_prerender_is_cancelled_when_cut_or_when_another_text_is_said():
    seqs = itertools.count()
    speaker, track = pipeline(pool=InlinePool())
    queue, store = track.sink.queue, track.sink.store
    tone = ToneSynthesizer(seconds=0.5)
    try:
        blocker = speaker.say("first", tone)  # keeps the next one pending
        held = speaker.prerender("second", tone)
        pending = speaker.say("second", tone, prerendered=held)
        assert speaker.interrupt() == 2
        assert pending.state is UtteranceState.INTERRUPTED
        assert blocker.state is UtteranceState.INTERRUPTED
        assert held.done and held.payloads == []
        if held.task is not None:
            await asyncio.gather(held.task, return_exceptions=True)
            assert held.task.cancelled() or held.task.done()

        other = speaker.prerender("not this", tone)
        said = speaker.say("this", tone, prerendered=other)  # another text: synthesized
        sent = await play_out(queue, store, said, seqs)
        assert len(sent) == 25 and said.state is UtteranceState.DONE
        assert other.done and other.payloads == []
    finally:
        await speaker.close()
