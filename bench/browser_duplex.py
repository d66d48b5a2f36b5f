"""End of speech -> reply audible, where the user is: real headless Chromium, the demo page's
Talk card, a fake microphone (issue 26's figure in the browser; ``bench.duplex`` measures the
same with an aiortc talker).

    .venv/bin/python -m bench.browser_duplex [--turns 10] [--detectors silence,smart-turn]

The gateway runs as ``make run`` starts it (its own process, ``--duplex --agent echo``, the
Piper voice) with each ``--turn-detector`` in turn. Chromium's capture device plays a WAV of
espeak-ng questions (``bench.duplex_peer.QUESTIONS``), each after ``--gap`` seconds of digital
silence, once (``%noloop``). The page is the demo page itself: Talk sends the microphone up a
sendrecv offer and plays the reply.

**What is timed, on the page's clock** (``performance.now()``; both analysers sit in the Talk
card's one AudioContext):

- the user's end of speech: the last moment the microphone analyser's level
  (``gatewayDemo.talk.micLevel()``, polled every 2 ms) was above ``--mic-threshold`` before the
  turn's ``speech_stopped`` event reached the page. The analyser's window is 512 samples
  (10.7 ms at 48 kHz), so this reading is up to 10.7 ms late (the figure up to that much low);
- the reply audible: the page's own onset of the reply (``turn.client.audibleAt``: the reply
  analyser's level over its onset threshold). That is when the audio graph renders it, before
  the output device's latency (``AudioContext.outputLatency``, reported beside: headless
  Chromium has no real device).

Beside it, per turn, the gateway's own split (``GET /v1/sessions/{id}``: endpointing, ASR,
TTS first audio, end of speech -> first audio on the wire). Targets (issue 26): median
<= 450 ms, p90 <= 550 ms with the turn detector; the silence detector measured in the same run.
JSON in bench/results/browser_duplex.json.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import wave
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import gateway_process, pct, write_results
from bench.duplex_peer import QUESTIONS, question_audio
from gateway.testing.spoken_audio import RATE, concat, silence
from tests.browser.chromium import launch

TARGET_MS = 450.0
TARGET_P90_MS = 550.0
READY = "() => window.gatewayDemo?.ready && window.gatewayDemo.voices !== null"
TALKING = ("() => window.gatewayDemo.talk.state === 'talking' && "
           "window.gatewayDemo.talk.channel === 'open' && window.gatewayDemo.talk.sse === 'open'")
SAMPLER = """(threshold) => {
  const m = window.__mic = { ends: [], last: null, speaking: false, hangover: 250 };
  m.timer = setInterval(() => {
    const now = performance.now();
    if (window.gatewayDemo.talk.micLevel() > threshold) {
      m.last = now;
      m.speaking = true;
    } else if (m.speaking && now - m.last > m.hangover) {
      m.ends.push(m.last);
      m.speaking = false;
    }
  }, 2);
}"""
READ = """() => ({
  ends: window.__mic.ends,
  turns: window.gatewayDemo.talk.turns.map((t) => ({
    turn: t.turn, text: t.text, latency: t.latency ?? null,
    stoppedAt: t.client.stoppedAt, audibleAt: t.client.audibleAt })),
})"""


def question_wav(path: Path, questions: list[str], gap_s: float) -> Path:
    """The capture device's signal: 2 s to connect, then each question after ``gap_s``."""
    parts = [silence(2.0)]
    for q in questions:
        parts += [question_audio(q), silence(gap_s)]
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(np.asarray(concat(*parts), dtype="<i2").tobytes())
    return path


def turn_rows(ends: list[float], turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each answered turn: the mic's last speech end before its speech_stopped -> audible."""
    rows = []
    for t in turns:
        if t["audibleAt"] is None or t["stoppedAt"] is None:
            continue
        before = [e for e in ends if e <= t["stoppedAt"]]
        if not before:
            continue
        end = before[-1]
        lat = t["latency"] or {}
        rows.append({"turn": t["turn"], "text": t["text"],
                     "end_of_speech_to_audible_ms": round(t["audibleAt"] - end, 1),
                     "end_to_speech_stopped_ms": round(t["stoppedAt"] - end, 1),
                     "gateway": {k: lat.get(k) for k in ("endpointing", "asr", "tts_first_audio",
                                                          "end_of_speech_to_audio")}})
    return rows


def stats(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "median": None, "p90": None}
    return {"n": len(values), "median": round(statistics.median(values), 1),
            "p90": round(pct(values, 90), 1), "min": round(min(values), 1),
            "max": round(max(values), 1)}


async def run_detector(playwright: Any, detector: str, wav: Path, turns: int,
                       args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--duplex", "--agent", "echo", "--turn-detector", detector, *args.gateway_arg]
    async with gateway_process(["piper"], extra, timeout=180) as url:
        browser = await launch(playwright, f"--use-file-for-fake-audio-capture={wav}%noloop")
        try:
            page = await (await browser.new_context()).new_page()
            await page.goto(url + "/")
            await page.wait_for_function(READY, timeout=60_000)
            await page.click("#talk-start")
            await page.wait_for_function(TALKING, timeout=60_000)
            await page.evaluate(SAMPLER, args.mic_threshold)
            deadline = asyncio.get_running_loop().time() + args.timeout
            data: dict[str, Any] = {"ends": [], "turns": []}
            while asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(1.0)
                data = await page.evaluate(READ)
                if sum(t["audibleAt"] is not None for t in data["turns"]) >= turns:
                    break
            output_latency = await page.evaluate(
                "() => { try { return new AudioContext().outputLatency ?? null; }"
                " catch (e) { return null; } }")
        finally:
            await browser.close()
    rows = turn_rows(data["ends"], data["turns"])
    return {"detector": detector, "questions": turns, "turns_seen": len(data["turns"]),
            "answered": len(rows), "output_latency_s": output_latency,
            "end_of_speech_to_audible_ms": stats([r["end_of_speech_to_audible_ms"]
                                                  for r in rows]),
            "end_to_speech_stopped_ms": stats([r["end_to_speech_stopped_ms"] for r in rows]),
            "rows": rows}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.turns)]
    results: dict[str, Any] = {"targets": {"median_ms": TARGET_MS, "p90_ms": TARGET_P90_MS},
                               "gap_s": args.gap, "detectors": []}
    with tempfile.TemporaryDirectory() as raw:
        wav = question_wav(Path(raw) / "questions.wav", questions, args.gap)
        async with async_playwright() as p:
            for detector in args.detectors.split(","):
                row = await run_detector(p, detector, wav, len(questions), args)
                results["detectors"].append(row)
                s = row["end_of_speech_to_audible_ms"]
                print(f"{detector:10} answered {row['answered']}/{len(questions)}: end of speech"
                      f" -> audible median {s['median']} / p90 {s['p90']} ms (target"
                      f" {TARGET_MS:.0f} / {TARGET_P90_MS:.0f}); end -> speech_stopped median"
                      f" {row['end_to_speech_stopped_ms']['median']} ms", flush=True)
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=10, help="questions per detector")
    p.add_argument("--detectors", default="silence,smart-turn")
    p.add_argument("--gap", type=float, default=6.0,
                   help="seconds of silence after each question (the reply plays in it)")
    p.add_argument("--mic-threshold", type=float, default=0.003,
                   help="microphone RMS (0..1) above which the user is speaking")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per detector")
    p.add_argument("--gateway-arg", action="append", default=[],
                   help="one more gateway flag (repeatable)")
    p.add_argument("--out", default="browser_duplex")
    args = p.parse_args(argv)
    results = asyncio.run(main_async(args))
    print(f"written: {write_results(args.out, results)}")
    return results


if __name__ == "__main__":
    main()
