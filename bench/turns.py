"""End-of-turn detectors compared (issue 26): how often a turn is cut too early (a false end) and
how long after the end of speech the turn ends, for ``silence`` (500 ms, today's default) and
``smart-turn`` (Smart Turn v3.2 + the speculative transcript, gateway/listen/turns.py).

A set of utterances made here: finished sentences, and sentences with a 300-600 ms pause spliced
in mid-phrase, each spoken by espeak-ng and by the Piper voice. Each is fed to a real listener
(Silero VAD, Whisper tiny.en, the turn model) in real time, 20 ms a frame, with the duplex
loop's settings (session/duplex.py: speculation after 100 ms, 100 ms post-speech pad).

- false end: the listener ended a turn before the utterance's speech was over;
- end of speech -> end of turn: when the listener declared the (last) turn over, after the
  utterance's last sample of speech (stream time, 20 ms resolution); items with a false end are
  left out of it;
- end of speech -> final transcript: the same to the final transcript (wall clock);
- taken back ("back"): false ends after which the next turn's speech started within
  ``CONTINUE_MS`` of the cut, which the duplex loop joins to the cut turn
  (conversation/continuation.py) -- the listener's count; ``bench.continuation`` measures what
  the agent is then asked, through the whole loop.

Beside them, measured in the same run: the turn model's own inference time (its floor) and the
Whisper decode time. ``python -m bench.turns [--quick] [--voices espeak,piper] [--variants
500:0.5,probe_ms=100:question_silence_ms=500]``; JSON in bench/results/turns.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bench.common import pct, write_results
from gateway.conversation.continuation import CONTINUE_MS, continues
from gateway.listen.listener import FinalTranscript, Listener
from gateway.listen.recognizers import build_recognizer
from gateway.listen.turn_loader import load_turn_model
from gateway.listen.turn_model import TurnModel
from gateway.listen.turns import SemanticOptions, SpeechStarted, SpeechStopped, TurnOptions
from gateway.listen.vad import build_vad
from gateway.testing.spoken_audio import concat, silence, speak, trim

RATE, FRAME = 16_000, 320
LEAD_S, TAIL_S = 0.5, 1.8  # silence before and after each utterance (the cap is 1.2 s)

FINISHED = [
    "What time is it in London?",
    "Can you tell me the weather for tomorrow?",
    "Please turn off the lights in the kitchen.",
    "I would like to book a table for two.",
    "How far is the nearest train station?",
    "Set a timer for ten minutes.",
]
PAUSED = [  # (first part, pause s, rest)
    ("I would like to order", 0.4, "a large pizza please."),
    ("Can you tell me", 0.5, "how long the drive to Boston takes?"),
    ("I want to, um", 0.6, "book a flight to Paris."),
    ("My favourite colour is", 0.3, "dark blue."),
    ("So I was thinking that", 0.5, "we could meet on Friday."),
    ("Turn the volume up", 0.45, "a little bit more please."),
]
TARGET = "false ends: smart-turn <= silence; end of speech -> end of turn: lower than silence"


@dataclass
class Item:
    voice: str
    text: str
    pause_s: float
    audio: np.ndarray
    speech_end_s: float  # stream time of the last speech sample


@dataclass
class Outcome:
    stops: list[float] = field(default_factory=list)  # SpeechStopped.at
    starts: list[float] = field(default_factory=list)  # SpeechStarted.at
    detected: list[float] = field(default_factory=list)  # SpeechStopped.detected_at
    reasons: list[str] = field(default_factory=list)
    final_at: float | None = None  # stream-equivalent seconds of the last final transcript
    decode_ms: list[float] = field(default_factory=list)
    verdicts: list[tuple[float, float]] = field(default_factory=list)  # (P(complete), seconds)
    texts: list[str] = field(default_factory=list)  # final transcripts


def _piper() -> Any:
    import soxr

    from gateway.tts.piper_voice import load_piper_voice

    voice = load_piper_voice()

    def say(text: str) -> np.ndarray:
        pcm = np.concatenate([c.audio_int16_array for c in voice.synthesize(text)])
        out = soxr.resample(pcm.astype(np.float32) / 32768, voice.config.sample_rate, RATE)
        return np.clip(np.round(out * 32767), -32768, 32767).astype(np.int16)

    return say


def build_items(voices: list[str]) -> list[Item]:
    items = []
    for voice in voices:
        say = speak if voice == "espeak" else _piper()
        for text in FINISHED:
            speech = trim(say(text))
            items.append(Item(voice, text, 0.0, concat(silence(LEAD_S), speech, silence(TAIL_S)),
                              LEAD_S + len(speech) / RATE))
        for first, pause, rest in PAUSED:
            speech = concat(trim(say(first)), silence(pause), trim(say(rest)))
            items.append(Item(voice, f"{first} [{pause * 1000:.0f} ms] {rest}", pause,
                              concat(silence(LEAD_S), speech, silence(TAIL_S)),
                              LEAD_S + len(speech) / RATE))
    return items


def make_listener(recognizer: Any, model: TurnModel | None,
                  semantic: SemanticOptions | None = None) -> Listener:
    """As DuplexFactory.make builds it (session/duplex.py defaults)."""
    turns = TurnOptions(stop_ms=500, barge_in_ms=300, post_speech_ms=100)
    return Listener(recognizer, vad=build_vad("silero"), turns=turns, partials=True,
                    speculate_ms=100, turn_model=model, semantic=semantic)


async def run_item(item: Item, recognizer: Any, model: TurnModel | None,
                   semantic: SemanticOptions | None = None) -> Outcome:
    listener = make_listener(recognizer, model, semantic)
    outcome = Outcome()
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def read() -> None:
        async for event in listener.events():
            if isinstance(event, SpeechStarted):
                outcome.starts.append(event.at)
            elif isinstance(event, SpeechStopped):
                outcome.stops.append(event.at)
                outcome.detected.append(event.detected_at)
                outcome.reasons.append(event.reason)
            elif isinstance(event, FinalTranscript):
                outcome.final_at = loop.time() - t0
                outcome.texts.append(event.text)
                if event.transcript.decode_seconds:
                    outcome.decode_ms.append(event.transcript.decode_seconds * 1000)

    reader = loop.create_task(read())
    frames = len(item.audio) // FRAME
    for i in range(frames):
        await asyncio.sleep(max(0.0, t0 + i * FRAME / RATE - loop.time()))
        listener.push(item.audio[i * FRAME:(i + 1) * FRAME])
    await asyncio.sleep(0.6)  # a final decode still running
    await listener.close(drain=True)
    await reader
    outcome.verdicts = list(listener.verdicts)
    return outcome


def summarise(items: list[Item], outcomes: list[Outcome]) -> dict[str, Any]:
    false_ends, taken_back, latency, to_final, per_item = 0, 0, [], [], []
    for item, out in zip(items, outcomes, strict=True):
        early = [s for s in out.stops if s < item.speech_end_s - 0.1]
        false = bool(early)
        false_ends += false
        # the duplex loop takes such a turn back when the user goes on within CONTINUE_MS of
        # the cut (conversation/continuation.py): the next turn's speech starts that soon
        back = false and all(any(continues(stop, start) for start in out.starts if start > stop)
                             for stop in early)
        taken_back += back
        last = out.detected[-1] if out.detected else None
        row = {"voice": item.voice, "text": item.text, "false_end": false,
               "taken_back": back,
               "turns": len(out.stops), "reasons": out.reasons,
               "end_of_turn_ms": None, "final_ms": None, "transcripts": out.texts,
               "verdicts": [[round(p, 3), round(t * 1000)] for p, t in out.verdicts]}
        if not false and last is not None:
            row["end_of_turn_ms"] = round((last - item.speech_end_s) * 1000)
            latency.append(row["end_of_turn_ms"])
            if out.final_at is not None:
                row["final_ms"] = round((out.final_at - item.speech_end_s) * 1000)
                to_final.append(row["final_ms"])
        per_item.append(row)

    def stats(values: list[float]) -> dict[str, float | None]:
        return {"median": statistics.median(values) if values else None,
                "p90": pct(values, 90), "n": len(values)}

    paused = [o for i, o in zip(items, outcomes, strict=True) if i.pause_s]
    return {
        "false_ends": false_ends, "items": len(items),
        "false_end_rate": round(false_ends / len(items), 3),
        "false_ends_taken_back": taken_back, "continue_ms": CONTINUE_MS,
        "false_ends_in_paused": sum(r["false_end"] for r in per_item if "[" in r["text"]),
        "paused_items": len(paused),
        "end_of_speech_to_end_of_turn_ms": stats(latency),
        "end_of_speech_to_final_ms": stats(to_final),
        "per_item": per_item,
    }


def parse_variant(variant: str) -> tuple[str, SemanticOptions]:
    """``UNSURE_MS[:THRESHOLD]`` (the older form) or ``FIELD=VALUE[:FIELD=VALUE...]`` of
    ``SemanticOptions`` (e.g. ``probe_ms=100:question_silence_ms=500``: the settings before
    2026-12-02); the rest at their defaults. Its name: ``smart-turn`` for the defaults."""
    default = SemanticOptions()
    if "=" in variant:
        fields = {f.name: f for f in dataclasses.fields(SemanticOptions)}
        changes: dict[str, Any] = {}
        for part in variant.split(":"):
            key, _, value = part.partition("=")
            if key not in fields:
                raise SystemExit(f"unknown SemanticOptions field {key!r} in {variant!r}")
            kind = type(getattr(default, key))
            changes[key] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
        options = dataclasses.replace(default, **changes)
    else:
        unsure, _, threshold = variant.partition(":")
        options = SemanticOptions(unsure_silence_ms=int(unsure),
                                  threshold=float(threshold or default.threshold))
    if options == default:
        return "smart-turn", options
    changed = [f"{f.name.replace('_silence_ms', '').replace('_ms', '')}{getattr(options, f.name):g}"
               for f in dataclasses.fields(SemanticOptions)
               if getattr(options, f.name) != getattr(default, f.name)]
    return "smart-" + "-".join(changed), options


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    load_start = [round(v, 2) for v in os.getloadavg()]
    voices = args.voices.split(",")
    items = build_items(voices)
    recognizer = build_recognizer("whisper:tiny.en")
    load = getattr(recognizer, "load", None)
    if load is not None:
        await load()
    model = load_turn_model("smart-turn")  # in its own process, as the gateway runs it
    assert model is not None
    start = getattr(model, "start", None)
    if start is not None:
        await asyncio.to_thread(start)
    # the model's floor on this machine now: its inference alone (and the pipe), on a
    # finished sentence
    floor = []
    for _ in range(5):
        started = time.perf_counter()
        model.probability(items[0].audio[: int((items[0].speech_end_s + 0.1) * RATE)])
        floor.append((time.perf_counter() - started) * 1000)
    results: dict[str, Any] = {}
    detectors: dict[str, SemanticOptions | None] = {"silence": None}
    for variant in args.variants.split(","):
        name, options = parse_variant(variant)
        detectors[name] = options
    for detector, semantic in detectors.items():
        outcomes = []
        for item in items:
            out = await run_item(item, recognizer, None if semantic is None else model, semantic)
            outcomes.append(out)
        results[detector] = summarise(items, outcomes)
        results[detector]["whisper_decode_ms"] = {
            "median": statistics.median([d for o in outcomes for d in o.decode_ms] or [0])}
        inference = [t * 1000 for o in outcomes for _, t in o.verdicts]
        if inference:
            results[detector]["turn_model_inference_ms"] = {
                "median": round(statistics.median(inference), 1), "n": len(inference)}
    await recognizer.close()
    close = getattr(model, "close", None)
    if close is not None:
        close()
    return {"target": TARGET, "voices": voices, "load_average_start": load_start,
            "load_average_end": [round(v, 2) for v in os.getloadavg()],
            "turn_model_inference_ms": {"median": round(statistics.median(floor), 1),
                                        "min": round(min(floor), 1)},
            "detectors": results}


def table(data: dict[str, Any]) -> str:
    lines = [f"target: {data['target']}",
             f"turn model inference alone: median {data['turn_model_inference_ms']['median']} "
             f"ms (min {data['turn_model_inference_ms']['min']}); load average at start "
             f"{data['load_average_start']} (end {data['load_average_end']})",
             f"{'detector':<27} {'false ends':>11} {'back':>5} {'paused':>7} {'EoS->EoT med':>13} "
             f"{'p90':>5} {'EoS->final med':>15} {'p90':>5}"]
    for name, r in data["detectors"].items():
        eot, fin = r["end_of_speech_to_end_of_turn_ms"], r["end_of_speech_to_final_ms"]
        lines.append(f"{name:<27} {r['false_ends']:>4}/{r['items']:<6} "
                     f"{r['false_ends_taken_back']:>5} "
                     f"{r['false_ends_in_paused']:>3}/{r['paused_items']:<3} "
                     f"{eot['median']!s:>13} {eot['p90']!s:>5} {fin['median']!s:>15} "
                     f"{fin['p90']!s:>5}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default="espeak,piper")
    parser.add_argument("--quick", action="store_true", help="espeak-ng only")
    default = SemanticOptions()
    parser.add_argument("--variants", default=f"{default.unsure_silence_ms}:{default.threshold}",
                        help="smart-turn variants, comma-separated: UNSURE_MS[:THRESHOLD] "
                        "(the pause that ends a turn the model calls unfinished whose "
                        "transcript could end there, and P(complete) from which it is "
                        "finished) or FIELD=VALUE[:FIELD=VALUE...] of SemanticOptions, e.g. "
                        "probe_ms=100:question_silence_ms=500 (the settings before 2026-12-02)")
    args = parser.parse_args()
    if args.quick:
        args.voices = "espeak"
    data = asyncio.run(main_async(args))
    path = write_results("turns", data)
    print(table(data))
    for name, r in data["detectors"].items():
        for row in r["per_item"]:
            print(f"  {name:<26} {row['voice']:<6} false_end={row['false_end']!s:<5} "
                  f"eot={row['end_of_turn_ms']!s:>5} final={row['final_ms']!s:>5} "
                  f"{row['text']} | P={[v[0] for v in row['verdicts']]} {row['transcripts']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
