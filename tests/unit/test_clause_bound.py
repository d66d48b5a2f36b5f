"""bound_clause: every piece within the bound and not empty, nothing lost or reordered, and a
cut at a word boundary wherever the bound holds one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.text.clause_bound import bound_clause, bound_clauses

text = st.text(st.sampled_from("ab 字。\t\n,.x"), max_size=400) | st.text(max_size=200)


@given(text, st.integers(1, 60))
def test_pieces_are_bounded_and_keep_every_character(clause, bound):
    pieces = bound_clause(clause, bound)
    assert all(0 < len(p) <= bound for p in pieces)
    assert all(p == p.strip() for p in pieces)
    assert "".join("".join(p.split()) for p in pieces) == "".join(clause.split())


@given(st.lists(st.text("abcdefgh", min_size=1, max_size=12), min_size=1, max_size=60))
def test_words_shorter_than_the_bound_are_never_split(words):
    pieces = bound_clauses([" ".join(words)], 20)
    assert [w for p in pieces for w in p.split(" ")] == words
