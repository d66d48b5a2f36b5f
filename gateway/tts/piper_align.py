"""Piper's own word timings: its phoneme durations, grouped into the text's words.

Piper (VITS) decides how many samples each phoneme id gets (the ``Ceil`` tensor of its duration
predictor). piper-tts 1.8 exposes it when the model's graph marks that tensor as an output
(``piper.patch_voice_with_alignment``, which needs the ``onnx`` package); ``patched_model``
does that in memory for our own ONNX session. ``synthesize(..., include_alignments=True)`` then
gives one ``PhonemeAlignment`` per phoneme (BOS and EOS included), whose samples sum to the
chunk's audio exactly.

espeak's words (space-separated phoneme runs) are not always the text's: "3.5" is "three point
five", "e.g." is "for example", "Dr." its own sentence, and "of the" one word. So the text's words
are matched to espeak's in order by their spoken lengths (a small dynamic programme: a text word
takes a run of phoneme words, or a few text words share one, split by length); should that
fail, the words are estimated at a constant character rate over Piper's own speech span.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gateway.text.timing import WordTiming, interpolate_words

_PUNCT = set(",.;:!?¡¿\u2014\u2013\u2026\"'()\u00ab\u00bb\u201c\u201d")
_MARKS = {"^", "$", "_"}  # BOS, EOS, PAD
_MAX_GROUP = 8  # phoneme words one text word may take ("https://..." spelt out)


def patched_model(model_path: str) -> bytes | None:
    """The voice's ONNX model with its phoneme durations as an output, or None without the
    ``onnx`` package (then Piper gives no alignments and timings are estimated)."""
    try:
        import onnx
        from piper.patch_voice_with_alignment import add_alignment_output
    except ImportError:
        return None
    model = onnx.load(model_path)
    try:
        add_alignment_output(model)
    except ValueError:  # already patched, or no Ceil tensor: use it as it is
        pass
    return model.SerializeToString()


def _phoneme_words(alignments: Sequence[Any], offset: int) -> list[tuple[str, int, int]]:
    """(phonemes, first sample, end sample) of each space-separated phoneme word."""
    words: list[tuple[str, int, int]] = []
    cur: list[str] = []
    start = end = pos = offset
    for a in alignments:
        n = int(a.num_samples)
        ph = a.phoneme
        if ph == " " or ph in _MARKS:
            if cur:
                words.append(("".join(cur), start, end))
                cur = []
        elif ph in _PUNCT:
            pass  # the pause after a word is not the word
        else:
            if not cur:
                start = pos
            cur.append(ph)
            end = pos + n
        pos += n
    if cur:
        words.append(("".join(cur), start, end))
    return words


def _spoken_length(word: str) -> float:
    """A rough count of the phonemes espeak makes of a written word: digits and symbols are
    read out ("3.5": three point five), acronyms spelt, letters about one each."""
    word = word.strip("".join(_PUNCT)) or word
    n = 0.0
    for i, ch in enumerate(word):
        if ch.isdigit():
            n += 4
        elif ch.isalpha():
            n += 2.5 if word.isupper() and len(word) <= 5 else 1
        elif ch == "." and 0 < i < len(word) - 1:
            n += 5  # "point", "dot"
        else:
            n += 5 if ch in "/:@&%$#+=" else 0.5
    return max(1.0, n)


def _group(text_words: list[str], ph_words: list[tuple[str, int, int]]
           ) -> list[tuple[int, int, int, int]]:
    """Text words matched to phoneme words in order, best by length: each step pairs a run of
    text words with a run of phoneme words, one side of it a single word (espeak reads "3.5"
    as three words and joins "of the" into one). Returns (text a, text b, phon a, phon b)."""
    n, m = len(text_words), len(ph_words)
    t_pre, p_pre = [0.0], [0.0]
    for w in text_words:
        t_pre.append(t_pre[-1] + _spoken_length(w))
    for p, _, _ in ph_words:
        p_pre.append(p_pre[-1] + max(1, len(p)))
    scale = p_pre[-1] / t_pre[-1]
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int]]] = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    steps = [(1, k) for k in range(1, _MAX_GROUP + 1)] + [(k, 1) for k in range(2, 4)]
    for i in range(n + 1):
        for j in range(m + 1):
            here = cost[i][j]
            if here == inf:
                continue
            for di, dj in steps:
                a, b = i + di, j + dj
                if a > n or b > m:
                    continue
                want = (t_pre[a] - t_pre[i]) * scale
                got = p_pre[b] - p_pre[j]
                c = here + (got - want) ** 2 + (di - 1) * 4.0  # joins are rarer than splits
                if c < cost[a][b]:
                    cost[a][b], back[a][b] = c, (di, dj)
    if cost[n][m] == inf:
        return []
    runs: list[tuple[int, int, int, int]] = []
    i, j = n, m
    while i or j:
        di, dj = back[i][j]
        runs.append((i - di, i, j - dj, j))
        i, j = i - di, j - dj
    return runs[::-1]


def phoneme_alignments(phoneme_id_map: dict[str, Sequence[int]], phonemes: Sequence[str],
                       phoneme_ids: Sequence[int], id_samples: Sequence[int]
                       ) -> list[Any] | None:
    """Piper's ``PhonemeAlignment``s of one sentence from the samples of each phoneme id (as
    ``PiperVoice.synthesize`` makes them: each phoneme owns its ids and the PAD after it,
    BOS and EOS included); None when the ids do not follow the phonemes."""
    from piper.const import BOS, EOS, PAD
    from piper.voice import PhonemeAlignment

    if len(id_samples) != len(phoneme_ids):
        return None
    pad = list(phoneme_id_map.get(PAD, []))
    out = []
    pos = 0
    for phoneme in [BOS, *phonemes, EOS]:
        ids = list(phoneme_id_map.get(phoneme, []))
        if phoneme != EOS:
            ids += pad
        if list(phoneme_ids[pos:pos + len(ids)]) != ids:
            return None
        out.append(PhonemeAlignment(phoneme=phoneme, phoneme_ids=ids,
                                    num_samples=int(sum(id_samples[pos:pos + len(ids)]))))
        pos += len(ids)
    return out


def word_timings(text: str, chunks: Iterable[Any], rate: int) -> list[WordTiming]:
    """``text``'s words timed from Piper's AudioChunks (their alignments), in ms from the
    first chunk's first sample. Empty when the chunks carry no alignments."""
    return sentence_word_timings(
        text, [(c.phoneme_alignments, int(c.audio_int16_array.size)) for c in chunks], rate)


def sentence_word_timings(text: str, sentences: Iterable[tuple[Sequence[Any] | None, int]],
                          rate: int) -> list[WordTiming]:
    """``text``'s words timed from each sentence's (alignments, samples), in ms from the
    first sentence's first sample: known from the durations alone, before any audio is
    decoded. Empty when a sentence has no alignments."""
    ph_words: list[tuple[str, int, int]] = []
    offset = 0
    for alignments, samples in sentences:
        if alignments is None:
            return []
        ph_words.extend(_phoneme_words(alignments, offset))
        offset += samples
    text_words = text.split()
    if not text_words or not ph_words:
        return []
    ms = 1000.0 / rate
    runs = _group(text_words, ph_words)
    if not runs:
        return interpolate_words(text, ph_words[0][1] * ms, ph_words[-1][2] * ms)
    out: list[WordTiming] = []
    for ta, tb, pa, pb in runs:
        start, end = ph_words[pa][1] * ms, ph_words[pb - 1][2] * ms
        if tb - ta == 1:
            out.append(WordTiming(text_words[ta], round(start, 1), round(end, 1)))
            continue
        # several text words in one phoneme word: its time shared by their spoken lengths
        shares = [_spoken_length(w) for w in text_words[ta:tb]]
        t = start
        for w, share in zip(text_words[ta:tb], shares, strict=True):
            d = (end - start) * share / sum(shares)
            out.append(WordTiming(w, round(t, 1), round(t + d, 1)))
            t += d
    return out
