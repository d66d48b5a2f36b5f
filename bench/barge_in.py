"""Barge-in that pauses first (issue 26), in a closed loop with no echo cancellation at all: the
reply (the Piper voice) is "played" 20 ms a slot from the conversation's queue, and what was
played comes back into the microphone 40 ms later at -20 dB (its own echo); on top of it, per
case, nothing (the echo alone), a cough (150 ms of noise), a "hm" (Piper), or a real barge-in
(espeak-ng: "Wait, stop, I have a question"), 1 s into the reply. The duplex loop is the real
one (Silero VAD, Whisper tiny.en, the pause gate), fed in real time.

Reported: pauses and cuts per case -- a pause or cut on the echo, cough or "hm" is false; for
the barge-ins, speech onset -> audio paused and onset -> cut (stream time: the slot the hold
took effect in), against the 250 ms target. The floor beside it: the pause minimum
(``barge_in_pause_ms``, 100 ms of voice) plus the VAD's 32 ms window.
``--gates new,old`` (the default) runs the pause gate as it is and as it was before 2026-12-02
(a reply's first echo pause backed the gate off too), interleaved run by run.
``python -m bench.barge_in [--quick] [--gates new,old]``; JSON in bench/results/barge_in.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from typing import Any

import numpy as np
import soxr

from bench.common import pct, write_results
from gateway.agent.echo import EchoAgent
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import Duplex, Turn
from gateway.listen.listener import Listener
from gateway.listen.recognizers import build_recognizer
from gateway.listen.turns import TurnOptions
from gateway.listen.vad import build_vad
from gateway.media.fanout import SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings
from gateway.speech.utterance import FINAL_STATES, UtteranceState
from gateway.testing.spoken_audio import noise, speak, trim

RATE, SLOT = 24_000, 480
ECHO_GAIN = 0.1  # -20 dB
ECHO_DELAY_SLOTS = 2
AT_S = 1.0
REPLIES = [
    "The weather in London tomorrow will be mild, with light rain in the afternoon.",
    "Your table for four is booked at the Italian place near the station, at eight.",
    "The train to Boston leaves at ten past nine and takes about four hours.",
    "I have set a timer for ten minutes, and I will tell you when it rings.",
    "Paris is about an hour and a quarter away by plane, a little more by train.",
    "Your favourite colour is dark blue, and so is the sofa you ordered last week.",
]
TARGET_MS = 250


def piper_24k(voice: Any, text: str) -> np.ndarray:
    pcm, _words = voice._render(text)  # (PCM, word timings)
    out = soxr.resample(pcm.astype(np.float32) / 32768, voice.sample_rate, RATE)
    return np.clip(np.round(out * 32767), -32768, 32767).astype(np.int16)


class EchoPath:
    """The closed loop's loudspeaker and microphone: each 20 ms slot ``play`` takes the next
    frame from the conversation's queue (reporting it sent, as the RTP sink would) and returns
    what reaches the microphone -- what was played ``ECHO_DELAY_SLOTS`` earlier, at
    ``ECHO_GAIN`` (float; the caller adds the user and clips). ``played``: the slot carried a
    frame of the reply."""

    def __init__(self, queue: FrameQueue) -> None:
        self.queue = queue
        self.sent = 0
        self.played = False
        self._delay = [np.zeros(SLOT, dtype=np.float32)] * ECHO_DELAY_SLOTS

    def play(self, now: float) -> np.ndarray:
        fields = self.queue.pop_fields()
        frame = np.zeros(SLOT, dtype=np.float32)
        self.played = fields is not None
        if fields is not None:
            payload, owner, index = fields
            owner.on_frame_sent(index, self.sent & 0xFFFF, self.sent * 480, now)
            self.sent += 1
            frame = np.frombuffer(payload, dtype="<i2").astype(np.float32)
        self._delay.append(frame)
        return self._delay.pop(0) * ECHO_GAIN


async def run_case(reply: str, user: np.ndarray | None, recognizer: Any, voice: Any,
                   backoff_on_first_echo: bool = False) -> dict[str, Any]:
    conversation = Conversation(EncoderSettings(), encode=False)  # 24 kHz PCM frames
    queue = FrameQueue(50)
    conversation.attach_sink("rtp", queue, SinkPolicy.BLOCK)
    turns = TurnOptions(stop_ms=500, barge_in_ms=300, post_speech_ms=100)
    listener = Listener(recognizer, vad=build_vad("silero"), turns=turns, partials=True,
                        speculate_ms=100)
    duplex = Duplex(conversation, listener, EchoAgent(), voice, pause_ms=100,
                    backoff_on_first_echo=backoff_on_first_echo)
    duplex.start()
    turn = Turn(1, 0.0, text="tell me")
    duplex.turns.append(turn)
    duplex._say(turn, reply)
    utterance = turn.utterances[0]
    loop = asyncio.get_running_loop()
    path = EchoPath(queue)
    slot, started, onset = 0, None, None
    paused_slot = cut_slot = ended = None
    pauses = 0
    t0 = loop.time()
    while slot < 2000:
        await asyncio.sleep(max(0.0, t0 + slot * 0.02 - loop.time()))
        mic = path.play(loop.time())
        if path.played and started is None:
            started = slot
        if started is not None and user is not None:
            at = (slot - started) * SLOT - round(AT_S * RATE)
            if 0 <= at < len(user):
                mic = mic + np.pad(user[at:at + SLOT], (0, max(0, SLOT - len(user[at:]))))
                if onset is None:
                    onset = slot
        was_paused = conversation.paused
        duplex.hear(np.clip(mic, -32768, 32767).astype(np.int16))
        if conversation.paused and not was_paused and ended is None:
            pauses += 1
            if paused_slot is None and onset is not None:
                paused_slot = slot
        if utterance.state is UtteranceState.INTERRUPTED and cut_slot is None:
            cut_slot = slot
        slot += 1
        if utterance.state in FINAL_STATES:
            ended = slot if ended is None else ended
            if slot > ended + 50:  # 1 s after the reply ended (what it set off stays out)
                break
    await duplex.close()
    await conversation.close()

    def ms(a: int | None, b: int | None) -> float | None:
        return None if a is None or b is None else (b - a) * 20

    return {"pauses": pauses, "cut": utterance.state is UtteranceState.INTERRUPTED,
            "paused_before_onset": onset is not None and paused_slot is None,
            "onset_to_pause_ms": ms(onset, paused_slot), "onset_to_cut_ms": ms(onset, cut_slot),
            "heard_text": turn.heard_text, "frames_sent": path.sent}


GATES = {"new": False, "old": True}  # name -> backoff_on_first_echo (old: before 2026-12-02)


def summarise(cases: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for name, runs in cases.items():
        row: dict[str, Any] = {"runs": len(runs), "paused": sum(r["pauses"] > 0 for r in runs),
                               "pauses": sum(r["pauses"] for r in runs),
                               "cut": sum(r["cut"] for r in runs)}
        if name == "barge-in":
            for key in ("onset_to_pause_ms", "onset_to_cut_ms"):
                values = [r[key] for r in runs if r[key] is not None]
                row[key] = {"median": statistics.median(values) if values else None,
                            "p90": pct(values, 90), "max": max(values) if values else None,
                            "n": len(values)}
        summary[name] = row
    return summary


async def main_async(replies: list[str], gates: list[str]) -> dict[str, Any]:
    from gateway.tts.piper_voice import PiperSynthesizer

    load_start = [round(v, 2) for v in os.getloadavg()]
    voice = PiperSynthesizer()
    await voice.warm_up()
    recognizer = build_recognizer("whisper:tiny.en")
    if (load := getattr(recognizer, "load", None)) is not None:
        await load()
    users = {"echo": None, "cough": noise(0.15, level=0.3, rate=RATE),
             "hm": trim(piper_24k(voice, "Hmm.")),
             "barge-in": trim(speak("Wait, stop, I have a question", rate=RATE))}
    cases: dict[str, dict[str, list[dict[str, Any]]]] = {
        gate: {name: [] for name in users} for gate in gates}
    for reply in replies:  # the gates interleaved, so both see the same machine
        for name, user in users.items():
            for gate in gates:
                cases[gate][name].append(await run_case(reply, user, recognizer, voice,
                                                        GATES[gate]))
    await recognizer.close()
    summary = {gate: summarise(runs) for gate, runs in cases.items()}
    return {"target": f"barge-in onset -> paused median <= {TARGET_MS} ms; false cuts on "
                      "echo/cough/hm: 0",
            "floor_ms": "pause minimum 100 ms of voice + the VAD's 32 ms window",
            "echo_gain_db": -20, "load_average_start": load_start,
            "load_average_end": [round(v, 2) for v in os.getloadavg()],
            "summary": summary, "runs": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 replies, not 6")
    parser.add_argument("--replies", default="",
                        help="which replies, comma-separated indices 0-5 (a long run in parts)")
    parser.add_argument("--gates", default="new,old",
                        help="pause gates, interleaved: new (the first echo lesson only learns "
                        "the level) and/or old (it backs off too: before 2026-12-02)")
    args = parser.parse_args()
    gates = [g for g in args.gates.split(",") if g]
    if unknown := set(gates) - set(GATES):
        parser.error(f"unknown gates {sorted(unknown)}: use {', '.join(GATES)}")
    replies = REPLIES[:3] if args.quick else REPLIES
    if args.replies:
        replies = [REPLIES[int(i)] for i in args.replies.split(",")]
    data = asyncio.run(main_async(replies, gates))
    path = write_results("barge_in", data)
    print(f"target: {data['target']}; floor: {data['floor_ms']}")
    print(f"load average {data['load_average_start']} (end {data['load_average_end']})")
    print(f"{'gate':<4} {'case':<9} {'runs':>4} {'paused':>6} {'pauses':>6} {'cut':>4}  "
          f"onset->pause  onset->cut")
    for gate, summary in data["summary"].items():
        for name, row in summary.items():
            extra = ""
            if name == "barge-in":
                p, c = row["onset_to_pause_ms"], row["onset_to_cut_ms"]
                extra = (f"  med {p['median']} p90 {p['p90']} max {p['max']}  "
                         f"med {c['median']} p90 {c['p90']}")
            print(f"{gate:<4} {name:<9} {row['runs']:>4} {row['paused']:>6} {row['pauses']:>6} "
                  f"{row['cut']:>4}{extra}")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
