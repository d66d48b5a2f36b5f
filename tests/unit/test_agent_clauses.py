"""Streamed clauses: the same cuts as split_clauses on the whole text, each as soon as it is
complete, whatever the token boundaries."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.agent.clauses import ClauseCutter, stream_clauses
from gateway.tts.clauses import split_clauses

WORDS = st.sampled_from(["yes", "no", "the", "train", "leaves", "at", "nine", "well", "I",
                         "think", "so", "forty-two", "really", "and", "then"])
PUNCT = st.sampled_from(["", "", "", ",", ".", "?", "!", ";", ":", " \u2014", "\u2026"])


@st.composite
def replies(draw) -> tuple[str, list[str]]:
    words = draw(st.lists(st.tuples(WORDS, PUNCT), min_size=0, max_size=40))
    text = " ".join(w + p for w, p in words)
    cuts = sorted(draw(st.sets(st.integers(0, max(len(text), 1)), max_size=30)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]
    return text, pieces


@settings(max_examples=200, deadline=None)
@given(replies())
def test_streamed_clauses_equal_split_clauses_of_the_whole(reply):
    text, pieces = reply
    cutter = ClauseCutter()
    out = [c for p in pieces for c in cutter.feed(p)] + cutter.finish()
    assert out == split_clauses(text)


def test_each_clause_comes_as_soon_as_the_next_word_begins():
    cutter = ClauseCutter()
    assert cutter.feed("Sure") == []
    assert cutter.feed(",") == []
    assert cutter.feed(" I") == ["Sure,"]
    assert cutter.feed(" can help you with that") == []
    assert cutter.feed(".") == []  # "that." may go on ("that.5"): no break without a space
    assert cutter.feed(" Next") == ["I can help you with that."]
    assert cutter.feed(" one") == []
    assert cutter.finish() == ["Next one"]


def test_a_long_first_sentence_is_cut_early():
    cutter = ClauseCutter()
    assert cutter.feed("Well I think that the answer") == []
    assert cutter.feed(" is") == ["Well I think that"]


async def test_stream_clauses_yields_before_the_stream_ends_and_closes_it():
    produced: list[str] = []
    closed = asyncio.Event()

    async def tokens():
        try:
            for t in ["Hello", " there", ".", " How", " are", " you", " today", "?", " Bye"]:
                produced.append(t)
                yield t
        finally:
            closed.set()

    clauses = stream_clauses(tokens())
    assert await anext(clauses) == "Hello there."
    assert produced[-1] == " How"  # the first clause came as soon as it was complete
    await clauses.aclose()
    assert closed.is_set()
    assert [c async for c in stream_clauses(tokens())] == ["Hello there.",
                                                           "How are you today?", "Bye"]
