"""Whisper repetition loops: found, and collapsed to one copy; ordinary text left alone."""

from __future__ import annotations

import pytest

from gateway.listen.repetition import collapse_loops, find_loop, has_loop


@pytest.mark.parametrize("text", [
    "Hello, can you hear me? Hello, can you hear me? Hello, can you hear me?",
    "I think that I think that I think that",
    "What time is it? What time is it? What time is",
    "How far is the moon from the earth? How far is the moon from the",
    "Could you tell me a joke about computers? Could you tell me a joke about computers?",
    "the the the the",
    "Thank you. Thank you. Thank you. Thank you.",
])
def test_loops_are_found(text):
    assert has_loop(text)


@pytest.mark.parametrize("text", [
    "What is the weather like in Paris today?",
    "No, no, no, I said Tuesday.",  # three times one word: people say that
    "I don't know, I don't know.",
    "Thank you. Thank you.",
    "Could you tell me a joke about computers?",
    "Bye bye.",
    "Where is the station? Where is the",  # a cut-off copy shorter than four words
    "",
])
def test_ordinary_text_is_no_loop(text):
    assert not has_loop(text)
    assert collapse_loops(text) == " ".join(text.split())


def test_collapse_keeps_the_first_copy_and_drops_a_cut_off_last_one():
    looped = "Hello, can you hear me? Hello, can you hear me? Hello, can you hear me? Hello, can"
    assert collapse_loops(looped) == "Hello, can you hear me?"
    assert collapse_loops("So I said the the the the the end.") == "So I said the end."
    assert collapse_loops("How far is the moon from the earth? How far is the moon from the") \
        == "How far is the moon from the earth?"


def test_find_loop_reports_where():
    assert find_loop("a b c d e f d e f d e f") == (3, 3, 3)
    assert find_loop("so what time is it what time is it") == (1, 4, 2)
