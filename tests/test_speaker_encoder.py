"""An Opus encoder exists only while an utterance is synthesized (memory per idle session)."""

import itertools

from gateway.speech.phrase_cache import PhraseCache
from gateway.speech.speaker import UtteranceState
from gateway.tts.tone import ToneSynthesizer
from tests.pipeline import InlinePool, pipeline, play_out


async def test_one_encoder_per_synthesized_utterance_none_for_cache_hits():
    seqs = itertools.count()
    cache = PhraseCache(8 * 1024 * 1024)
    speaker, track = pipeline(cache=cache, pool=InlinePool())
    queue, store = track.sink.queue, track.sink.store
    speaker.start()
    tone = ToneSynthesizer(seconds=0.5)
    try:
        await speaker.idle.wait()
        assert speaker.encoders_created == 0
        first = speaker.say("hello", tone)
        await play_out(queue, store, first, seqs)
        await speaker.idle.wait()
        assert first.state is UtteranceState.DONE and not first.cached
        assert first.text == "" and first.as_json()["chars"] == 5  # history keeps no text
        assert speaker.encoders_created == 1
        again = speaker.say("hello", tone)  # a phrase cache hit: replayed, nothing encoded
        await play_out(queue, store, again, seqs)
        await speaker.idle.wait()
        assert again.state is UtteranceState.DONE and again.cached
        assert again.frames_sent == first.frames_sent == 25
        assert speaker.encoders_created == 1
    finally:
        await speaker.close()
