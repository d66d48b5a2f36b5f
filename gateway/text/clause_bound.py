"""The length bound on one clause: no piece of text reaches a synthesizer longer than this.

A sentence-at-a-time voice (Piper) renders a clause in one model run whose memory grows with the
clause (text with no punctuation at all is one clause: 20,000 characters of it grew the process
past 10 GB). So every clause is cut to at most ``max_chars`` characters before it is rendered:
at the last whitespace within the bound (a word boundary), or, where the bound holds no
whitespace (scripts written without spaces, such as Chinese, or one absurdly long "word"), after
the last character that fits -- preferring a CJK punctuation mark when the piece has one.

The segmenter (``segmenter.py``) decides where natural clauses end and cuts at this same bound;
this function only guarantees it, applied last, where clauses reach a synthesizer (whatever
cut them).
"""

from __future__ import annotations

from collections.abc import Iterable

#: About two spoken sentences (≈12 s of speech): well above any clause a splitter cuts at
#: punctuation, small enough that one model run stays at tens of MB.
MAX_CLAUSE_CHARS = 200
# Where a piece without whitespace may still be cut: ideographic full stop, comma, enumeration
# comma, semicolon, colon, exclamation and question marks, ellipsis, closing brackets
_CJK_BREAKS = "\u3002\uff0c\u3001\uff1b\uff1a\uff01\uff1f\u2026\u300d\u300f\uff09"


def bound_clause(clause: str, max_chars: int = MAX_CLAUSE_CHARS) -> list[str]:
    """``clause`` as pieces of at most ``max_chars`` characters (stripped, none empty), cut
    at word boundaries where there are any. Joining the pieces with single spaces gives back
    the clause with its whitespace runs collapsed where a cut fell."""
    if max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    pieces: list[str] = []
    rest = clause.strip()
    while len(rest) > max_chars:
        window = rest[: max_chars + 1]  # a space just past the bound is a boundary too
        cut = max(window.rfind(" "), window.rfind("\t"), window.rfind("\n"))
        if cut > 0:
            head, rest = rest[:cut], rest[cut + 1 :]
        else:
            mark = max(window[:max_chars].rfind(c) for c in _CJK_BREAKS)
            end = mark + 1 if mark > 0 else max_chars
            head, rest = rest[:end], rest[end:]
        head = head.strip()
        if head:
            pieces.append(head)
        rest = rest.lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def bound_clauses(clauses: Iterable[str], max_chars: int = MAX_CLAUSE_CHARS) -> list[str]:
    """Every clause of ``clauses`` through ``bound_clause``, in order."""
    return [piece for clause in clauses for piece in bound_clause(clause, max_chars)]
