"""The assembled listener: espeak-ng speech through the real Silero VAD and turn detector, with a
fake recogniser (fast, scripted) -- event order, partials while speaking, finals in order."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from gateway.listen.asr import RecognitionError, Transcript
from gateway.listen.listener import (
    FinalTranscript,
    Listener,
    PartialTranscript,
    TentativeTranscript,
    TranscriptionFailed,
)
from gateway.listen.turns import BargeIn, SpeechStarted, SpeechStopped
from gateway.testing.spoken_audio import concat, frames, have_espeak, noise, silence, speak, trim
from tests.installed import need_module, needs

need_module("faster_whisper", "the [listen] extra (faster-whisper carries the Silero VAD model)")
pytestmark = needs("espeak-ng", have_espeak(), "speaks the test audio "
                   "(apt-get install -y espeak-ng)")


class ScriptedRecognizer:
    name = "scripted"

    def __init__(self, finals: list[str | Exception], delay: float = 0.0) -> None:
        self.finals = list(finals)
        self.delay = delay
        self.partial_calls = 0

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        await asyncio.sleep(self.delay)
        if not final:
            self.partial_calls += 1
            return Transcript(f"partial {len(audio16k)}", False, len(audio16k) / 16000)
        answer = self.finals.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Transcript(answer, True, len(audio16k) / 16000)

    async def close(self) -> None:
        return None


async def hear(listener: Listener, audio: np.ndarray, pace: float = 0.0) -> None:
    for f in frames(audio):
        listener.push(f)
        await asyncio.sleep(pace)
    listener.flush()


async def collect(listener: Listener) -> list[object]:
    return [e async for e in listener.events()]


def two_questions() -> np.ndarray:
    return concat(silence(0.3), trim(speak("What is the weather like")), silence(0.3),
                  trim(speak("in Paris today?")), silence(1.0), noise(0.1, level=0.3),
                  silence(0.6), trim(speak("And tomorrow?")), silence(1.0))


async def test_turns_then_finals_in_order_and_noise_is_no_turn():
    rec = ScriptedRecognizer(["What is the weather like in Paris today?", "And tomorrow?"],
                             delay=0.05)
    listener = Listener(rec, partials=False)
    reader = asyncio.create_task(collect(listener))
    await hear(listener, two_questions())
    await listener.close(drain=True)
    events = await reader
    # a speculation's decode (50 ms) may finish before the turn's end is judged when the loop
    # is slow (a loaded machine): its TentativeTranscript is then announced, inside its turn
    transcripts = (FinalTranscript, TentativeTranscript)
    turn_events = [type(e) for e in events if not isinstance(e, transcripts)]
    assert turn_events == [SpeechStarted, BargeIn, SpeechStopped] * 2
    finals = [e for e in events if isinstance(e, FinalTranscript)]
    assert [(f.turn, f.text) for f in finals] == [
        (1, "What is the weather like in Paris today?"), (2, "And tomorrow?")]
    starts = [i for i, e in enumerate(events) if isinstance(e, SpeechStarted)]
    stops = [i for i, e in enumerate(events) if isinstance(e, SpeechStopped)]
    for i, e in enumerate(events):
        if isinstance(e, TentativeTranscript):
            assert starts[e.turn - 1] < i < stops[e.turn - 1]
            assert e.text == finals[e.turn - 1].text and finals[e.turn - 1].speculative
    assert finals[0].stopped.reason == "silence"
    assert events.index(finals[0]) > stops[0]


async def test_partials_arrive_while_speaking_and_never_after_the_turn():
    rec = ScriptedRecognizer(["done"])
    listener = Listener(rec, partial_interval=0.1)
    reader = asyncio.create_task(collect(listener))
    speech = concat(silence(0.2), trim(speak("Could you tell me a joke about computers?")),
                    silence(0.8))
    await hear(listener, speech, pace=0.005)  # 4x real time
    await listener.close(drain=True)
    events = await reader
    kinds = [type(e) for e in events]
    stop = kinds.index(SpeechStopped)
    partials = [e for e in events if isinstance(e, PartialTranscript)]
    assert len(partials) >= 2 and all(p.turn == 1 for p in partials)
    assert all(kinds.index(SpeechStarted) < events.index(p) < stop for p in partials)
    assert kinds[-1] is FinalTranscript


async def test_a_failed_final_is_reported_and_hearing_goes_on():
    rec = ScriptedRecognizer([RecognitionError("server down"), "And tomorrow?"])
    # one scripted answer per turn: no speculative decodes (a discarded one would take one)
    listener = Listener(rec, partials=False, speculate_ms=None)
    reader = asyncio.create_task(collect(listener))
    await hear(listener, two_questions())
    await listener.close(drain=True)
    events = await reader
    failed = [e for e in events if isinstance(e, TranscriptionFailed)]
    assert len(failed) == 1 and failed[0].turn == 1 and "server down" in str(failed[0].error)
    assert [e.text for e in events if isinstance(e, FinalTranscript)] == ["And tomorrow?"]


async def test_push_returns_the_barge_in_at_once():
    listener = Listener(ScriptedRecognizer(["x"]), partials=False)
    seen = []
    for f in frames(concat(silence(0.2), trim(speak("Stop, stop, please stop.")))):
        seen += listener.push(f)
        if any(isinstance(e, BargeIn) for e in seen):
            break
    await listener.close()
    assert [type(e) for e in seen] == [SpeechStarted, BargeIn]
    assert seen[1].voiced >= 0.3
    with pytest.raises(RuntimeError):
        listener.push(np.zeros(320, dtype=np.int16))
