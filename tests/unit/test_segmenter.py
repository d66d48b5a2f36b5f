"""The incremental segmenter: clauses as soon as complete, whatever the chunking; flush, end;
numbers, abbreviations and URLs kept whole; no clause over the bound."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.text.segmenter import MAX_CLAUSE_CHARS, Segmenter, split_clauses
from gateway.text.streaming import stream_clauses

WORDS = st.sampled_from(["yes", "no", "the", "train", "leaves", "at", "nine", "well", "I",
                         "think", "so", "forty-two", "really", "and", "then", "Dr.", "e.g.",
                         "3.5", "https://example.com/a.b?c=d", "U.S.", "\"quoted.\"",
                         "\u4e2d\u6587", "\u4f60\u597d\uff0c", "\u597d\u3002", "x" * 250])
PUNCT = st.sampled_from(["", "", "", ",", ".", "?", "!", ";", ":", " \u2014", "\u2026"])
SPACE = st.sampled_from([" ", " ", "  ", "\n", " \t"])


@st.composite
def texts(draw) -> str:
    words = draw(st.lists(st.tuples(WORDS, PUNCT, SPACE), min_size=0, max_size=60))
    return "".join(w + p + s for w, p, s in words)


def chunked(draw, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, max(len(text), 1)), max_size=40)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)]) if text[a:b]]


@st.composite
def chunkings(draw) -> tuple[str, list[str]]:
    text = draw(texts())
    return text, chunked(draw, text)


def run(pieces: list[str], segmenter: Segmenter | None = None) -> list[str]:
    segmenter = segmenter or Segmenter()
    return [c for p in pieces for c in segmenter.feed(p)] + segmenter.end()


@settings(max_examples=300, deadline=None)
@given(chunkings(), st.integers(1, 8), st.integers(1, 4), st.integers(8, 300), st.integers(0, 4))
def test_any_chunking_yields_the_clauses_of_the_whole(case, first, min_words, bound, eager):
    text, pieces = case
    whole = run([text], Segmenter(first, min_words, bound, eager))
    assert run(pieces, Segmenter(first, min_words, bound, eager)) == whole
    if not eager:
        assert whole == split_clauses(text, first, min_words, bound)
    assert all(0 < len(c) <= bound for c in whole)
    assert all(c == c.strip() and "  " not in c for c in whole)
    # nothing lost, nothing added: the words in order (a bound cut may split a long token)
    assert "".join(" ".join(whole).split()) == "".join(text.split())


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_flush_speaks_the_buffer_and_the_input_goes_on(data):
    a, b = data.draw(texts()), data.draw(texts())
    segmenter = Segmenter()
    out = run(chunked(data.draw, a), segmenter=None)  # a alone, ended
    flushed = [c for p in chunked(data.draw, a) for c in segmenter.feed(p)] + segmenter.flush()
    assert flushed == out
    assert segmenter.buffered == 0
    rest = [c for p in chunked(data.draw, b) for c in segmenter.feed(p)] + segmenter.end()
    assert "".join(" ".join(flushed + rest).split()) == "".join((a + b).split())
    assert segmenter.end() == []
    # after end the segmenter starts over: the next text is cut as a first text
    assert run(chunked(data.draw, b), segmenter) == split_clauses(b)


def test_each_clause_comes_as_soon_as_it_is_complete():
    s = Segmenter()
    assert s.feed("Sure") == []
    assert s.feed(",") == []
    assert s.feed(" ") == ["Sure,"]  # the whitespace after the break completes it
    assert s.feed("I can help you with that") == []
    assert s.feed(".") == []  # "that." may go on ("that.5"): no break without a space
    assert s.feed(" Next") == ["I can help you with that."]
    assert s.feed(" one") == []
    assert s.end() == ["Next one"]


def test_a_long_first_sentence_is_cut_as_soon_as_it_runs_long():
    s = Segmenter()
    assert s.feed("Well I think that the answer") == []
    assert s.feed(" is") == ["Well I think that"]


def test_streamed_text_may_start_after_its_first_words():
    s = Segmenter(eager_first_words=3)
    assert s.feed("Hello") == [] and s.feed(" there") == [] and s.feed(" my") == []
    assert s.feed(" ") == ["Hello there my"]  # the third word is complete: speak it
    assert s.feed("friend. How are you") == ["friend."]
    assert s.end() == ["How are you"]
    assert Segmenter(eager_first_words=3).feed("Oh, hi there you ") == ["Oh,"]  # a break first


def test_the_cuts_of_the_old_splitter_are_kept():
    text = "Hello there, this is the gateway speaking. It streams audio in real time; fast!"
    clauses = split_clauses(text)
    assert clauses[0] == "Hello there,"
    assert " ".join(clauses) == text
    long = "The quick brown fox jumps over the lazy dog and keeps running far away."
    assert split_clauses(long, first_max_words=6)[0] == "The quick brown fox"
    assert split_clauses("  ") == []
    assert split_clauses("Hi.") == ["Hi."]
    assert split_clauses("Well, yes, no, maybe, so it goes, my friend.") == [
        "Well,", "yes, no, maybe,", "so it goes,", "my friend."]


@pytest.mark.parametrize("text", [
    "Dr. Smith arrived.", "Use e.g. this one.", "It costs 3.5 dollars.",
    "See https://example.com/a.b?x=1.2 now.", "The U.S. team won.", "At 10:30 today.",
])
def test_numbers_abbreviations_and_urls_do_not_split(text):
    assert split_clauses(text, first_max_words=20) == [text]


def test_sentence_punctuation_inside_quotes_still_breaks():
    assert split_clauses('He said "stop." Then he left.') == ['He said "stop."', "Then he left."]


def test_scripts_without_spaces_break_at_their_punctuation_and_are_bounded():
    a, b, c = "\u4f60\u597d\uff0c", "\u6211\u662f\u3002", "\u5929\u6c14\u5f88\u597d\uff01"
    assert split_clauses(a + b + c) == [a, b, c]  # "hello, I am. fine weather!"
    clauses = split_clauses("\u4e2d" * 1000)
    assert [len(c) for c in clauses] == [MAX_CLAUSE_CHARS] * 5


def test_text_without_punctuation_is_cut_at_word_boundaries_within_the_bound():
    text = " ".join(f"w{i}" for i in range(20_000))  # ~130k characters, no punctuation
    clauses = split_clauses(text)
    assert max(len(c) for c in clauses) <= MAX_CLAUSE_CHARS
    assert all(c.startswith("w") and not c.endswith(" ") for c in clauses)
    assert " ".join(clauses) == text  # only ever cut between words


def test_the_buffer_stays_bounded_while_text_streams_in():
    s = Segmenter()
    for _ in range(5000):
        s.feed("word ")
        assert s.buffered <= MAX_CLAUSE_CHARS + 1


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


def test_a_tiny_rest_after_the_eager_first_words_merges_with_the_next():
    s = Segmenter(eager_first_words=2)
    out = s.feed("one two three, four five six. seven ") + s.end()
    assert out == ["one two", "three, four five six.", "seven"]
