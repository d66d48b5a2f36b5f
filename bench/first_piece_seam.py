"""The seam a short first piece leaves: PESQ of the joined pieces against the one-piece render.

    python -m bench.first_piece_seam [--first-words 0 2 3]

For each sentence of ``bench.elevenlabs_first_audio`` (the texts its WebSocket run speaks), the
segmenter cuts it as a streamed context does (LLM-like tokens, ``eager_first_words`` N; 0: the
segmenter's usual first cut), each clause is rendered the way the context renders it (one
``PiperSynthesizer.stream`` per clause, the previous clause passed as ``after``) and the audio is
joined; the reference is the whole sentence in one Piper run. Piper's noise scales are 0 here
(its default draws new noise every run, and two renders of one text would differ by more than
any seam: the same setting as ``bench.audio_score``), so what differs is the cutting alone.

Scored: wideband PESQ (``bench.audio_score.pesq_wb``, 24 kHz -> 16 kHz) of the pieces each laid
where it matches its own words in the reference (``placed``: a pause at a joint would otherwise
shift the whole rest, which PESQ charges as a warp, not as the seam), mean and worst over the
sentences, per N and mode (``plain``: each clause rendered as a text of its own, as before;
``after``: told the clause before it); target: every N's mean within
0.1 of the usual cut's (N = 0) in the same run. Also printed: each N's first piece's render
time (median, ms), and the load average. JSON in bench/results/first_piece_seam.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import numpy as np
import soxr

from bench.audio_score import pesq_wb
from bench.common import write_results
from bench.elevenlabs_first_audio import EXTRA, tokens
from bench.latency import SENTENCES
from gateway.media.opus_codec import SAMPLE_RATE
from gateway.text.segmenter import Segmenter

TARGET_DROP = 0.1
SEARCH_S = 0.25


def clauses(text: str, first_words: int) -> list[str]:
    seg = Segmenter(eager_first_words=first_words)
    out: list[str] = []
    for tok in tokens(text):
        out += seg.feed(tok)
    return out + seg.end()


def to24(pcm: np.ndarray, rate: int) -> np.ndarray:
    out = soxr.resample(pcm.astype(np.float32), rate, SAMPLE_RATE, quality="HQ")
    return np.clip(out, -32768, 32767).astype(np.int16)


async def rendered(voice: Any, parts: list[str], after: bool
                   ) -> tuple[list[np.ndarray], float]:
    """Each clause rendered by a stream of its own (as a context does), and the time to the
    first piece's PCM (ms). ``after``: each stream told the clause before it (else each one is
    rendered as a text of its own, as before ``after`` existed)."""
    out: list[np.ndarray] = []
    first_ms = 0.0
    previous: str | None = None
    for i, clause in enumerate(parts):
        started = time.perf_counter()
        pcm: list[np.ndarray] = []
        async for chunk in voice.stream(clause, after=previous if after else None):
            if i == 0 and not first_ms:
                first_ms = (time.perf_counter() - started) * 1000
            pcm.append(np.frombuffer(chunk.data, dtype="<i2"))
        out.append(np.concatenate(pcm))
        previous = clause
    return out, first_ms


def placed(ref: np.ndarray, spans: list[tuple[int, int]], pieces: list[np.ndarray],
           rate: int) -> np.ndarray:
    """The pieces laid on the reference's timeline, each where it matches its own words' span
    of the reference best (cross-correlation within ``SEARCH_S`` of the span's start), added
    where they overlap: what the pieces sound like, without the shift that the pauses at the
    joints move everything after them by (PESQ would charge that as a time warp of the whole
    rest, not as the seam it is)."""
    out = np.zeros(ref.size + rate, dtype=np.float64)
    search = int(SEARCH_S * rate)
    for piece, (a, _) in zip(pieces, spans, strict=True):
        lo = max(0, a - search)
        seg = ref[lo : a + piece.size + search].astype(np.float64)
        size = 1 << int(np.ceil(np.log2(seg.size + piece.size)))
        corr = np.fft.irfft(np.fft.rfft(seg, size) * np.conj(np.fft.rfft(piece, size)), size)
        lag = lo + int(np.argmax(corr[: max(1, seg.size - piece.size + 1)]))
        end = min(out.size, lag + piece.size)
        out[lag:end] += piece[: end - lag]
    return np.clip(out[: ref.size], -32768, 32767).astype(np.int16)


def spans(words: list[Any], parts: list[str], rate: int, size: int) -> list[tuple[int, int]]:
    """Each clause's span of the reference: from its first word's start to the next clause's
    (the first from 0, the last to the end), so the reference's own slices, laid back, are the
    reference (PESQ 4.64)."""
    starts, i = [], 0
    for clause in parts:
        starts.append(0 if not i else int(words[min(i, len(words) - 1)].start_ms * rate / 1000))
        i += len(clause.split())
    return list(zip(starts, [*starts[1:], size], strict=True))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-words", type=int, nargs="+", default=[0, 3, 2])
    parser.add_argument("--modes", nargs="+", default=["plain", "after"],
                        help="plain: each clause a text of its own; after: told the one before")
    args = parser.parse_args()
    import piper.voice
    from piper import SynthesisConfig

    from gateway.tts.piper_voice import PiperSynthesizer

    piper.voice._DEFAULT_SYNTHESIS_CONFIG = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    voice = PiperSynthesizer()
    await voice.warm_up()
    texts = [*SENTENCES, *EXTRA]
    refs = {text: voice._render(text) for text in texts}
    rate = voice.sample_rate
    rows: dict[str, Any] = {}
    load = os.getloadavg()[0]
    for n, mode in [(n, m) for n in args.first_words for m in args.modes]:
        scores, firsts, per = [], [], []
        for text in texts:
            parts = clauses(text, n)
            pieces, first_ms = await rendered(voice, parts, mode == "after")
            ref, words = refs[text]
            audio = placed(ref, spans(words, parts, rate, ref.size), pieces, rate)
            score = pesq_wb(to24(ref, rate), to24(audio, rate))
            scores.append(score if score is not None else 0.0)
            firsts.append(first_ms)
            per.append({"text": text, "clauses": parts, "pesq": score,
                        "first_pcm_ms": round(first_ms, 1)})
        rows[f"{n} {mode}"] = {"pesq_mean": round(statistics.fmean(scores), 3),
                        "pesq_min": round(min(scores), 3),
                        "first_pcm_ms_median": round(statistics.median(firsts), 1),
                        "sentences": per}
    base = rows[f"{args.first_words[0]} {args.modes[0]}"]["pesq_mean"]
    result = {"target_drop": TARGET_DROP, "baseline_first_words": args.first_words[0],
              "load_average": load, "rows": rows}
    path = write_results("first_piece_seam", result)
    print(f"load average {load:.2f} at the start")
    print(f"{'first_words mode':>16} {'PESQ mean':>9} {'min':>6} {'vs base':>8} {'first PCM':>9}")
    for n, r in rows.items():
        print(f"{n:>16} {r['pesq_mean']:9.3f} {r['pesq_min']:6.3f} "
              f"{r['pesq_mean'] - base:+8.3f} {r['first_pcm_ms_median']:8.1f}ms")
    print(f"target: each mean within {TARGET_DROP} of the first row's "
          f"(first_words={args.first_words[0]} {args.modes[0]}: today's cut); "
          f"{len(texts)} sentences")
    print(f"JSON: {path}")


if __name__ == "__main__":
    asyncio.run(main())
