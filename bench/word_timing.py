"""Word-timing error of the character-rate estimate (the CosyVoice path) against Piper's own.

    python -m bench.word_timing

CosyVoice gives no word timings, so the gateway estimates them at a constant character rate
over each clause's audible span (``gateway.text.timing.estimate_words``). Piper gives its own
(its phoneme durations, ``gateway.tts.piper_align``): here each clause the Piper voice would
render is rendered once, and the estimate made from the same audio is compared with Piper's own
timings, word by word (start and end, ms). Beside it the naive baseline: the same span cut into
equal parts per word. Target printed beside the figures: p90 of the start error <= 150 ms.
JSON in bench/results/word_timing.json, and a table.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.common import machine, pct, write_results
from bench.latency import SENTENCES
from gateway.text.segmenter import split_clauses
from gateway.text.timing import WordTiming, audible_span, estimate_words

TARGET_P90_START_MS = 150.0
EXTRA = [
    "Dr. Smith paid 3.5 dollars for 42 apples, e.g. at the market today.",
    "Well, I think the train to Edinburgh leaves at half past nine, doesn't it?",
    "Our new model is faster, cheaper and, according to the tests, more accurate.",
    "Turn left at the second junction; then keep going for about three miles.",
]


def equal_split(text: str, start: float, end: float) -> list[WordTiming]:
    words = text.split()
    step = (end - start) / max(1, len(words))
    return [WordTiming(w, start + i * step, start + (i + 1) * step, True)
            for i, w in enumerate(words)]


def errors(own: list[WordTiming], guess: list[WordTiming]) -> tuple[list[float], list[float]]:
    starts = [abs(a.start_ms - b.start_ms) for a, b in zip(own, guess, strict=True)]
    ends = [abs(a.end_ms - b.end_ms) for a, b in zip(own, guess, strict=True)]
    return starts, ends


def summary(values: list[float]) -> dict[str, Any]:
    return {"p50": pct(values, 50), "p90": pct(values, 90), "max": max(values), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    from gateway.tts.piper_voice import FIRST_MAX_WORDS, PiperSynthesizer

    voice = PiperSynthesizer()
    rows: dict[str, dict[str, list[float]]] = {
        "char-rate estimate": {"start": [], "end": []},
        "equal per word (baseline)": {"start": [], "end": []},
    }
    clauses = [c for s in [*SENTENCES, *EXTRA] for c in split_clauses(s, FIRST_MAX_WORDS)]
    for clause in clauses:
        pcm, own = voice._render(clause)
        if not own or own[0].estimated:
            continue
        a, b = audible_span(pcm, voice.sample_rate)
        for name, guess in (("char-rate estimate", estimate_words(clause, pcm, voice.sample_rate)),
                            ("equal per word (baseline)", equal_split(clause, a, b))):
            s, e = errors(own, guess)
            rows[name]["start"] += s
            rows[name]["end"] += e
    result = {"clauses": len(clauses), "target_p90_start_ms": TARGET_P90_START_MS,
              "machine": machine(),
              "rows": {k: {"start_ms": summary(v["start"]), "end_ms": summary(v["end"])}
                       for k, v in rows.items()}}
    path = write_results("word_timing", result)
    print(f"{'method':28} {'start p50':>9} {'p90':>7} {'end p50':>8} {'p90':>7} {'words':>6}")
    for name, r in result["rows"].items():
        s, e = r["start_ms"], r["end_ms"]
        print(f"{name:28} {s['p50']:9.1f} {s['p90']:7.1f} {e['p50']:8.1f} {e['p90']:7.1f} "
              f"{s['n']:6d}")
    print(f"target: char-rate start p90 <= {TARGET_P90_START_MS:.0f} ms; {len(clauses)} clauses")
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
