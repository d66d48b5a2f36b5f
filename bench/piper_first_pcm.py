"""Text -> Piper's first PCM: the whole-graph render against the split one, in the same run.

    python -m bench.piper_first_pcm [--rounds 3] [--threads 1 2]

In this process, on the gateway's own Piper pool: for each of a dozen sentences (bench.latency's
and two more), ``PiperSynthesizer.stream(text)`` until its first chunk, for
- ``whole``: ``piper?split=0``, the whole ONNX graph per clause, peak-normalised (as before),
- ``split-N``: the graph split at its decoder, the first 120 ms decoded first, N intra-op threads
  per half (encoder and decoder sessions; 2 is the gateway's),
interleaved sentence by sentence (whole, split-1, split-2, ...), ``--rounds`` times, after a
warm-up of each. Printed: median / p90 / min of text -> first PCM (ms) per mode, and the load
average. Also measured, from the same sentences:
- the seam: a first piece (its first word, decoded with CONTEXT_FRAMES of right context)
  against the whole decode of the same latent frames, max |difference| in LSB over the piece,
- the level: Piper's raw peak per sentence, and how far the fixed OUTPUT_GAIN puts each
  sentence from the peak-normalised level it had (dB; negative = softer), with the share of
  samples clipped.
JSON in bench/results/piper_first_pcm.json, and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import numpy as np

from bench.common import pct, write_results
from bench.latency import SENTENCES
from gateway.tts import piper_voice as pv
from gateway.tts.piper_model import CONTEXT_FRAMES

TEXTS = [*SENTENCES, "Let me look that up for you.", "Absolutely, your table is booked."]


async def first_pcm_ms(voice: pv.PiperSynthesizer, text: str) -> float:
    started = time.perf_counter()
    stream = voice.stream(text)
    try:
        async for _ in stream:
            return (time.perf_counter() - started) * 1000
    finally:
        await stream.aclose()  # the rest is not wanted: cancel it, as a cut utterance does
    raise RuntimeError(f"no audio for {text!r}")


def split_voice(threads: int) -> pv.PiperSynthesizer:
    """A split voice whose two sessions have ``threads`` intra-op threads each."""
    voice = pv.PiperSynthesizer(name=f"split-{threads}")
    saved = pv.INTRA_OP_THREADS
    pv.INTRA_OP_THREADS = threads
    try:
        voice.split = voice.pool.submit(pv._build_split, voice.voice).result()
    finally:
        pv.INTRA_OP_THREADS = saved
    return voice


def seam_and_level(voice: pv.PiperSynthesizer) -> list[dict[str, Any]]:
    assert voice.split is not None
    rows = []
    for text in TEXTS:
        sentences = voice._encode(text, None)
        enc = sentences[0].encoded
        whole = voice.split.decode(enc)
        words = voice._words(text, sentences)
        cut = max(1, round(words[0].end_ms * voice.sample_rate / 1000 / voice.split.hop_length))
        piece = voice.split.decode(enc, 0, cut, CONTEXT_FRAMES)
        peak = float(np.abs(whole).max())
        rows.append({
            "text": text,
            "first_piece_frames": cut,
            "seam_max_lsb": round(float(np.abs(piece - whole[: piece.size]).max()) * 32767, 3),
            "raw_peak": round(peak, 3),
            "gain_vs_normalised_db": round(20 * np.log10(pv.OUTPUT_GAIN * peak), 2),
            "clipped_share": float(np.mean(np.abs(whole * pv.OUTPUT_GAIN) > 1.0)),
        })
    return rows


def summary(values: list[float]) -> dict[str, float | None]:
    return {"median": statistics.median(values), "p90": pct(values, 90), "min": min(values),
            "n": len(values)}


async def main(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    whole = pv.PiperSynthesizer(name="whole", split=False)
    voices = {"whole": whole, **{f"split-{n}": split_voice(n) for n in args.threads}}
    for v in voices.values():
        await v.warm_up()
        for text in TEXTS[:2]:
            await first_pcm_ms(v, text)
    times: dict[str, list[float]] = {name: [] for name in voices}
    for _ in range(args.rounds):
        for text in TEXTS:
            for name, v in voices.items():
                times[name].append(await first_pcm_ms(v, text))
    split_name = f"split-{max(args.threads)}"
    checks = seam_and_level(voices[split_name])
    load_after = os.getloadavg()
    results = {name: summary(t) for name, t in times.items()}
    path = write_results("piper_first_pcm", {
        "results": results, "runs": times, "seam_and_level": checks, "texts": TEXTS,
        "rounds": args.rounds, "output_gain": pv.OUTPUT_GAIN, "context_frames": CONTEXT_FRAMES,
        "load_average": [load_before[0], load_after[0]],
    })
    print(f"text -> first PCM (ms), {len(TEXTS)} sentences x {args.rounds} rounds, "
          f"load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    print(f"{'mode':<10} {'median':>8} {'p90':>8} {'min':>8}")
    for name, r in results.items():
        print(f"{name:<10} {r['median']:>8.1f} {r['p90']:>8.1f} {r['min']:>8.1f}")
    seams = [c["seam_max_lsb"] for c in checks]
    gains = [c["gain_vs_normalised_db"] for c in checks]
    clipped = [c["clipped_share"] for c in checks]
    print(f"seam: first piece vs whole decode, max {max(seams):.3f} LSB "
          f"({CONTEXT_FRAMES} frames of context)")
    print(f"level at gain {pv.OUTPUT_GAIN}: {min(gains):+.1f} .. {max(gains):+.1f} dB against "
          f"peak-normalised (median {statistics.median(gains):+.1f}); clipped samples max "
          f"{max(clipped) * 100:.3f} %")
    print(f"written {path}", flush=True)  # before exit: a cancelled run's threads may abort it


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    asyncio.run(main(parser.parse_args()))
