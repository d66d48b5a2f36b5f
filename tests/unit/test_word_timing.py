"""Word timings: the character-rate estimate, and the record's own arithmetic."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gateway.text.timing import WordTiming, audible_span, estimate_words, interpolate_words


@given(st.lists(st.text("abcdefg,.", min_size=1, max_size=12), min_size=1, max_size=30),
       st.floats(0, 1000), st.floats(1, 20_000))
def test_interpolated_words_are_in_order_inside_the_span(words, start, length):
    text = " ".join(words)
    timed = interpolate_words(text, start, start + length)
    assert [w.word for w in timed] == text.split()
    assert all(w.estimated for w in timed)
    ends = [start] + [x for w in timed for x in (w.start_ms, w.end_ms)] + [start + length]
    assert all(b >= a - 0.11 for a, b in itertools.pairwise(ends))  # rounding to 0.1 ms


def test_longer_words_take_longer_and_pauses_follow_punctuation():
    timed = interpolate_words("a abcdefgh, b", 0, 1300)
    assert timed[1].end_ms - timed[1].start_ms > 4 * (timed[0].end_ms - timed[0].start_ms)
    assert timed[2].start_ms - timed[1].end_ms > timed[1].start_ms - timed[0].end_ms


def test_the_estimate_spans_the_audible_part_only():
    rate = 24000
    pcm = np.zeros(rate, dtype=np.int16)
    pcm[6000:18000] = 5000  # audible from 250 ms to 750 ms
    assert audible_span(pcm, rate) == (250.0, 750.0)
    timed = estimate_words("one two three", pcm, rate)
    assert timed[0].start_ms == 250.0 and timed[-1].end_ms == 750.0


def test_shifted_moves_both_ends():
    assert WordTiming("x", 10, 20).shifted(5) == WordTiming("x", 15, 25)
