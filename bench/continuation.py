"""Turns ended too early, through the whole duplex loop (issue 26): what the agent is asked when
the user pauses mid-sentence, with and without taking the cut turn back
(conversation/continuation.py), for both end-of-turn detectors.

``bench.turns``' utterances (sentences with a 300-600 ms pause spliced in mid-phrase, and
finished ones as the control), espeak-ng and Piper, are the user's microphone, fed in real time
to a real duplex loop (Silero VAD, Whisper tiny.en, the turn model in its process, the echo
agent, the Piper voice, the pause gate); the reply is "played" 20 ms a slot from the
conversation's queue and comes back into the microphone 40 ms later at -20 dB (no echo
canceller), as in ``bench.barge_in``.

Per utterance, the turns the agent answered and kept (a turn taken back is not kept). A
**split** is a user-facing false end: the agent answered one utterance as more than one turn
(the first half on its own), or not at all. ``--configs`` (default all four):
``silence``, ``silence-nojoin``, ``smart``, ``smart-nojoin`` (``-nojoin``: ``continue_ms=0``,
the loop before this change), ``smart-long`` (unsure 500 ms, cap 1200: as before
2026-12-03, ``OVERRIDES``).

    python -m bench.continuation [--voices espeak,piper] [--configs ...] [--finished]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
from typing import Any

import numpy as np
import soxr

from bench.barge_in import SLOT, EchoPath
from bench.common import write_results
from bench.turns import Item, build_items
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import DuplexFactory, HearingOptions
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.speech.utterance import FINAL_STATES

UPLINK = 24_000
AFTER_S = 6.0  # listening after the utterance: the last turn's final and reply
CONFIGS = {"silence": ("silence", None), "silence-nojoin": ("silence", 0),
           "smart": ("smart-turn", None), "smart-nojoin": ("smart-turn", 0),
           "smart-long": ("smart-turn", None)}
#: HearingOptions changed per config (smart-long: smart-turn's unsure wait and cap before
#: 2026-12-03, as bench.duplex's echo-smart-long)
OVERRIDES: dict[str, dict[str, int]] = {
    "smart-long": {"turn_unsure_silence_ms": 500, "turn_max_silence_ms": 1200}}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


async def run_item(item: Item, factory: DuplexFactory, detector: str,
                   continue_ms: int | None) -> dict[str, Any]:
    conversation = Conversation(EncoderSettings(), encode=False)  # 24 kHz PCM frames
    queue = FrameQueue(50)
    conversation.attach_sink("rtp", queue, SinkPolicy.BLOCK)
    duplex = factory.make(conversation, turn_detector=detector)
    if continue_ms is not None:
        duplex.continue_ms = continue_ms
    duplex.start()
    mic = soxr.resample(item.audio.astype(np.float32), 16_000, UPLINK)
    loop = asyncio.get_running_loop()
    path = EchoPath(queue)
    slots = len(mic) // SLOT + int(AFTER_S * 50)
    t0 = loop.time()
    for slot in range(slots):
        await asyncio.sleep(max(0.0, t0 + slot * 0.02 - loop.time()))
        frame = path.play(loop.time())
        user = mic[slot * SLOT:(slot + 1) * SLOT]
        if len(user):
            frame[:len(user)] += user
        duplex.hear(np.clip(frame, -32768, 32767).astype(np.int16))
        if slot * SLOT > len(mic) and duplex.turns and not duplex.speaking \
                and all(u.state in FINAL_STATES for t in duplex.turns for u in t.utterances) \
                and duplex.turns[-1].replied_at is not None:
            break
    answered = [t for t in duplex.turns if t.reply and not t.superseded]
    taken_back = sum(t.superseded for t in duplex.turns)
    await duplex.close()
    await conversation.close()
    said = words(item.text.replace("[", " ").split("]")[-1]) if item.pause_s else []
    last = answered[-1].text if answered else ""
    return {"voice": item.voice, "text": item.text, "answered": [t.text for t in answered],
            "split": len(answered) != 1, "taken_back": taken_back,
            # the rest's last word heard in what was answered (Whisper may mishear it)
            "rest_in_answer": bool(said) and said[-1] in words(last),
            "history": [m.content for m in duplex.history]}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from gateway.tts.piper_voice import PiperSynthesizer

    load_start = [round(v, 2) for v in os.getloadavg()]
    items = [i for i in build_items(args.voices.split(",")) if i.pause_s or args.finished]
    voice = PiperSynthesizer()
    await voice.warm_up()
    configs = [c for c in args.configs.split(",") if c]
    base = HearingOptions(turn_detector="smart-turn")
    factory = DuplexFactory(base, voice)
    await factory.load()
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    for item in items:  # the configs interleaved, so each sees the same machine
        for config in configs:
            detector, continue_ms = CONFIGS[config]
            factory.options = dataclasses.replace(base, **OVERRIDES.get(config, {}))
            runs[config].append(await run_item(item, factory, detector, continue_ms))
    await factory.close()
    summary = {c: {"items": len(r), "splits": sum(x["split"] for x in r),
                   "taken_back": sum(x["taken_back"] for x in r),
                   "rest_in_answer": sum(x["rest_in_answer"] for x in r)}
               for c, r in runs.items()}
    return {"target": "splits (user-facing false ends) with smart-turn <= silence's",
            "echo_gain_db": -20, "load_average_start": load_start,
            "load_average_end": [round(v, 2) for v in os.getloadavg()],
            "summary": summary, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voices", default="espeak,piper")
    parser.add_argument("--configs", default="silence,silence-nojoin,smart,smart-nojoin")
    parser.add_argument("--finished", action="store_true",
                        help="the finished sentences too (the control: one turn each)")
    args = parser.parse_args()
    if unknown := {c for c in args.configs.split(",") if c} - set(CONFIGS):
        parser.error(f"unknown configs {sorted(unknown)}: use {', '.join(CONFIGS)}")
    data = asyncio.run(main_async(args))
    path = write_results("continuation", data)
    print(f"target: {data['target']}")
    print(f"load average {data['load_average_start']} (end {data['load_average_end']})")
    print(f"{'config':<15} {'items':>5} {'splits':>6} {'taken back':>10} {'rest answered':>13}")
    for config, row in data["summary"].items():
        print(f"{config:<15} {row['items']:>5} {row['splits']:>6} {row['taken_back']:>10} "
              f"{row['rest_in_answer']:>13}")
    for config, rows in data["runs"].items():
        for row in rows:
            print(f"  {config:<15} {row['voice']:<6} split={row['split']!s:<5} "
                  f"back={row['taken_back']} {row['text']} -> {row['answered']}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
