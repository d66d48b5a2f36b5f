from gateway.tts.clauses import split_clauses


def test_first_clause_is_short_and_text_is_kept_in_order():
    text = "Hello there, this is the gateway speaking. It streams audio in real time; fast!"
    clauses = split_clauses(text)
    assert clauses[0] == "Hello there,"
    assert " ".join(clauses) == text


def test_long_first_sentence_is_cut_early():
    text = "The quick brown fox jumps over the lazy dog and keeps running far away."
    clauses = split_clauses(text, first_max_words=6)
    assert len(clauses[0].split()) <= 6
    assert " ".join(clauses) == text


def test_tiny_pieces_merge_and_whitespace_collapses():
    assert split_clauses("  ") == []
    assert split_clauses("Hi.") == ["Hi."]
    clauses = split_clauses("Well, yes, no, maybe, so it goes, my friend.")
    assert all(len(c.split()) >= 2 for c in clauses[1:])
    assert " ".join(clauses) == "Well, yes, no, maybe, so it goes, my friend."
