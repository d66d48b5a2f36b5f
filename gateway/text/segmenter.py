"""Text in as it is written -> clauses for speech, each as soon as it is complete.

One incremental segmenter for every path that speaks text: a whole request (``split_clauses``),
an agent's streamed tokens (``stream_clauses``), an ElevenLabs context's pushed chunks. Text
arrives in pieces of any size (a character, a token, a sentence); each clause comes out of
``feed`` the moment it is complete, ``flush`` speaks whatever is buffered now, ``end`` closes the
input. The characters go through one state machine (runs of plain characters appended at once,
which is what stepping them one by one would do), so the clauses depend only on the text, never
on how it was chunked.

The cuts:

- a break is whitespace after sentence punctuation (``. ! ? …``) or clause punctuation
  (``, ; :`` and dashes), closing quotes/brackets allowed in between; a number ("3.5",
  "1,000"), a URL or a time never breaks (no whitespace inside), and neither does a known
  abbreviation ("Dr.", "e.g.", "U.S.");
- the punctuation of scripts written without spaces (the ideographic full stop, the full-width
  ``! ? , ; :``, the enumeration comma) breaks at once;
- the first clause is kept short (it decides first-audio latency): a first sentence longer than
  ``first_max_words`` words is cut after ``max(min_words, first_max_words // 2 + 1)`` of them;
  with ``eager_first_words`` (streamed text, where the next words are still being written) it
  is cut as soon as that many words are complete, without waiting to see how long it runs
  (what follows is a later piece: a tiny rest of the clause merges with the next);
- later clauses shorter than ``min_words`` words that do not end a sentence are merged with the
  next, so no piece is tiny;
- no clause is ever longer than ``max_chars`` characters: text without punctuation is cut at the
  last word boundary within the bound, or after ``max_chars`` characters when it has none (a
  script without spaces, one huge token). Whatever the input, the work per clause is bounded.

Whitespace runs collapse to one space; clauses carry no leading or trailing whitespace.
"""

from __future__ import annotations

import re

from gateway.text.clause_bound import MAX_CLAUSE_CHARS

SENTENCE_END = ".!?…"
CLAUSE_END = ",;:\u2014\u2013"  # also em and en dashes
# Breaks without the whitespace after them: scripts written without spaces (CJK).
CJK_SENTENCE_END = "\u3002\uff01\uff1f"
CJK_CLAUSE_END = "\uff0c\u3001\uff1b\uff1a"
CLOSERS = "\"')]}\u00bb\u201d\u2019\u300d\u300f"
OPENERS = "\"'([{\u00ab\u201c\u2018"
# A clause is never longer than MAX_CLAUSE_CHARS (clause_bound.py, the one bound every path
# keeps): the synthesis work per clause stays bounded.
FIRST_MAX_WORDS = 6
MIN_WORDS = 3

ABBREVIATIONS = frozenset({
    "mr.", "mrs.", "ms.", "dr.", "prof.", "sr.", "jr.", "st.", "mt.", "vs.", "e.g.", "i.e.",
    "cf.", "approx.", "fig.", "dept.", "gen.", "gov.", "sgt.", "capt.", "lt.", "col.", "rev.",
})
_DOTTED = re.compile(r"^(?:\w\.){2,}$")  # "u.s.", "a.k.a."
_RUNS = re.compile(r"\s+|\S+")  # \s is str.isspace()'s whitespace
_CJK_BREAK = re.compile(f"[{CJK_SENTENCE_END}{CJK_CLAUSE_END}]")


def _is_abbreviation(token: str) -> bool:
    token = token.lstrip(OPENERS).lower()
    return token in ABBREVIATIONS or bool(_DOTTED.match(token))


def _ends_sentence(piece: str) -> bool:
    last = piece.rstrip(CLOSERS)[-1:]
    return bool(last) and (last in SENTENCE_END or last in CJK_SENTENCE_END)


class Segmenter:
    """``feed`` pieces of text, get back the clauses they complete; ``flush``; ``end``."""

    def __init__(self, first_max_words: int = FIRST_MAX_WORDS, min_words: int = MIN_WORDS,
                 max_chars: int = MAX_CLAUSE_CHARS, eager_first_words: int = 0) -> None:
        if max_chars < 2 or min_words < 1 or first_max_words < 1 or eager_first_words < 0:
            raise ValueError("max_chars must be >= 2, min_words and first_max_words >= 1, "
                             "eager_first_words >= 0")
        self.first_max_words = first_max_words
        self.min_words = min_words
        self.max_chars = max_chars
        self.eager_first_words = eager_first_words
        self._reset()

    def _reset(self) -> None:
        self._cur: list[str] = []  # the open piece, whitespace already collapsed
        self._cur_len = 0
        self._words = 0  # words in the open piece
        self._space = False  # whitespace seen after the open piece's last character
        self._held: str | None = None  # a short complete piece waiting to merge with the next
        self._index = 0  # pieces completed so far (the first one is never merged into)
        self._first_cut = False  # the first clause's early cut (or any clause) is out
        self._out: list[str] = []

    @property
    def buffered(self) -> int:
        """Characters fed and not yet out in a clause."""
        held = len(self._held) + 1 if self._held else 0
        return held + self._cur_len

    def feed(self, text: str) -> list[str]:
        for run in _RUNS.findall(text):
            if run[0].isspace():
                self._step(" ")  # a run of whitespace acts as its first character
            elif self.buffered + len(run) + 1 > self.max_chars or _CJK_BREAK.search(run):
                for ch in run:
                    self._step(ch)
            else:  # plain characters: only the first can start a word; the rest just append
                self._step(run[0])
                if len(run) > 1:
                    self._cur.append(run[1:])
                    self._cur_len += len(run) - 1
        out, self._out = self._out, []
        return out

    def flush(self) -> list[str]:
        """Everything buffered, as clauses now (the input goes on)."""
        self._close_piece(final=True)
        out, self._out = self._out, []
        return out

    def end(self) -> list[str]:
        """The input is over: the rest, and the segmenter is ready for a new text."""
        out = self.flush()
        self._reset()
        return out

    # -- the state machine ---------------------------------------------------------------

    def _step(self, ch: str) -> None:
        if ch.isspace():
            if not self._cur or self._space:
                return
            if self._ends_at_break():
                self._close_piece()
            elif (self.eager_first_words and not self._index and not self._first_cut
                  and self._words >= self.eager_first_words):
                self._emit_eager_first()
            else:
                self._space = True
            return
        if self._space:
            self._space = False
            self._cur.append(" ")
            self._cur_len += 1
            self._words += 1
            self._maybe_cut_first()
        elif not self._cur:
            self._words = 1
        self._cur.append(ch)
        self._cur_len += 1
        self._bound()
        if ch in CJK_SENTENCE_END or ch in CJK_CLAUSE_END:
            self._close_piece()

    def _ends_at_break(self) -> bool:
        text = "".join(self._cur).rstrip(CLOSERS)
        if not text:
            return False
        last = text[-1]
        if last in CLAUSE_END:
            return True
        if last not in SENTENCE_END:
            return False
        if last == ".":
            token = text.rsplit(" ", 1)[-1]
            return not _is_abbreviation(token)
        return True

    def _maybe_cut_first(self) -> None:
        """A first sentence that runs past first_max_words: its first words go now."""
        if self._index or self._first_cut or self._words <= self.first_max_words:
            return
        keep = min(max(self.min_words, self.first_max_words // 2 + 1), self._words - 1)
        text = "".join(self._cur)  # ends with the space before the new word
        head = text.split(" ")[:keep]
        head_text = " ".join(head)
        self._emit(head_text)
        rest = text[len(head_text) + 1:]
        self._cur = list(rest)
        self._cur_len = len(rest)
        self._words -= keep

    def _emit_eager_first(self) -> None:
        """Streamed text: the first words go as soon as they are complete (the rest of the
        sentence follows as a clause of its own)."""
        self._emit("".join(self._cur))
        self._cur, self._cur_len, self._words = [], 0, 0
        self._index = 1  # the rest is a later piece: merged with the next if it is tiny

    def _bound(self) -> None:
        if self._held is not None and len(self._held) + 1 + self._cur_len > self.max_chars:
            held, self._held = self._held, None
            self._emit(held)
        if self._cur_len <= self.max_chars:
            return
        text = "".join(self._cur)
        cut = text.rfind(" ", 0, self.max_chars + 1)
        if cut > 0:
            head, rest = text[:cut], text[cut + 1:]
        else:
            head, rest = text[:self.max_chars], text[self.max_chars:]
        self._emit(head)
        self._cur = list(rest)
        self._cur_len = len(rest)
        self._words = len(rest.split())

    def _close_piece(self, final: bool = False) -> None:
        piece = "".join(self._cur)
        self._cur, self._cur_len, self._words, self._space = [], 0, 0, False
        if piece:
            if self._index == 0:
                self._index = 1
                self._emit(piece)
                piece = ""
            else:
                self._index += 1
                if self._held is not None:
                    piece = f"{self._held} {piece}"
                    self._held = None
                if len(piece.split()) < self.min_words and not _ends_sentence(piece):
                    self._held = piece
                    piece = ""
        if final and self._held is not None:
            piece = f"{self._held} {piece}" if piece else self._held
            self._held = None
        if piece:
            self._emit(piece)

    def _emit(self, clause: str) -> None:
        self._first_cut = True
        self._out.append(clause)


def split_clauses(text: str, first_max_words: int = FIRST_MAX_WORDS, min_words: int = MIN_WORDS,
                  max_chars: int = MAX_CLAUSE_CHARS) -> list[str]:
    """A whole text's clauses: what the segmenter makes of it fed at once and ended."""
    segmenter = Segmenter(first_max_words, min_words, max_chars)
    return segmenter.feed(text) + segmenter.end()
