"""Speculative finals: the final decode starts after ``speculate_ms`` of silence, while the turn
detector still waits for its end; it is the final transcript if the turn ends on that audio, and
is dropped if the user speaks again. A scripted VAD (loud frames are speech) and a recogniser
whose decodes finish only when the test says so: the order of things is exact."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest

from gateway.listen.asr import Transcript
from gateway.listen.listener import (
    FinalTranscript,
    Listener,
    SegmentSkipped,
    TentativeTranscript,
)
from gateway.listen.turns import BargeIn, SpeechStarted, SpeechStopped, TurnOptions

FRAME = 320


class LoudIsSpeech:
    name = "loud"

    def probability(self, frame: np.ndarray) -> float:
        return 0.9 if np.abs(frame).max() > 1000 else 0.05

    def reset(self) -> None:
        return None


@dataclass
class Call:
    samples: int
    final: bool
    at_frame: int  # frames pushed when the decode was asked for
    release: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


class HeldRecognizer:
    """Each decode waits for its ``release``; its text names the call."""

    name = "held"

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.frames = 0
        self.called = asyncio.Event()

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        call = Call(len(audio16k), final, self.frames)
        self.calls.append(call)
        self.called.set()
        try:
            await call.release.wait()
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        return Transcript(f"call {len(self.calls)}", final, len(audio16k) / 16_000)

    async def close(self) -> None:
        return None


def speech(frames: int) -> list[np.ndarray]:
    return [np.full(FRAME, 8000, dtype=np.int16)] * frames


def quiet(frames: int) -> list[np.ndarray]:
    return [np.zeros(FRAME, dtype=np.int16)] * frames


async def push_all(listener: Listener, rec: HeldRecognizer, frames: list[np.ndarray],
                   seen: list[object]) -> None:
    for f in frames:
        rec.frames += 1
        seen += listener.push(f)
        await asyncio.sleep(0)  # let started tasks run (as the event loop does between frames)


def options() -> TurnOptions:
    # 500 ms to end a turn, 200 ms post-speech pad: a speculation at 200 ms has 300 ms
    return TurnOptions(stop_ms=500, post_speech_ms=200, start_ms=100)


async def next_event(listener_events, kind: type) -> object:
    async for event in listener_events:
        if isinstance(event, kind):
            return event
    raise AssertionError(f"no {kind.__name__}")


async def test_the_final_decode_starts_in_the_silence_and_is_the_final_transcript():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    seen: list[object] = []
    await push_all(listener, rec, quiet(5) + speech(50), seen)
    await push_all(listener, rec, quiet(10), seen)  # 200 ms of silence
    assert [c.final for c in rec.calls] == [True] and rec.calls[0].at_frame == 65
    assert not any(isinstance(e, SpeechStopped) for e in seen)  # the turn is still open
    rec.calls[0].release.set()  # the decode finishes long before the turn ends
    await push_all(listener, rec, quiet(15), seen)  # 500 ms of silence in all: the end
    stopped = [e for e in seen if isinstance(e, SpeechStopped)]
    assert len(stopped) == 1
    # the speculated audio is exactly the segment the turn ended with
    assert rec.calls[0].samples == len(stopped[0].audio)
    events = listener.events()
    final = await asyncio.wait_for(next_event(events, FinalTranscript), 1.0)
    assert isinstance(final, FinalTranscript)
    assert final.text == "call 1" and final.speculative and final.turn == 1
    assert len(rec.calls) == 1  # no second decode of the same audio
    assert listener.stats() == {"speculations": 1, "speculations_used": 1,
                                "speculations_discarded": 0}
    await listener.close()


async def test_the_user_going_on_discards_the_speculation_and_a_new_one_is_made():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    seen: list[object] = []
    # a 300 ms pause inside the sentence: one turn, a speculation made in the pause
    await push_all(listener, rec, quiet(5) + speech(40) + quiet(15), seen)
    assert len(rec.calls) == 1
    first = rec.calls[0]
    await push_all(listener, rec, speech(30), seen)
    assert first.cancelled  # dropped as soon as the user spoke again
    await push_all(listener, rec, quiet(10), seen)
    assert len(rec.calls) == 2 and rec.calls[1].samples > first.samples
    rec.calls[1].release.set()
    await push_all(listener, rec, quiet(20), seen)
    assert [type(e) for e in seen].count(SpeechStarted) == 1
    final = await asyncio.wait_for(next_event(listener.events(), FinalTranscript), 1.0)
    assert isinstance(final, FinalTranscript)
    assert final.text == "call 2" and final.speculative
    assert listener.stats() == {"speculations": 2, "speculations_used": 1,
                                "speculations_discarded": 1}
    await listener.close()


async def test_a_decode_still_running_at_the_end_of_the_turn_is_awaited_not_repeated():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    seen: list[object] = []
    await push_all(listener, rec, quiet(5) + speech(50) + quiet(30), seen)
    assert any(isinstance(e, SpeechStopped) for e in seen) and len(rec.calls) == 1
    events = listener.events()
    waiting = asyncio.ensure_future(next_event(events, FinalTranscript))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # the final waits for the speculative decode ...
    rec.calls[0].release.set()
    final = await asyncio.wait_for(waiting, 1.0)  # ... and is its answer
    assert isinstance(final, FinalTranscript) and final.text == "call 1"
    assert len(rec.calls) == 1
    await listener.close()


@pytest.mark.parametrize("speculate_ms", [None, 0])
async def test_without_speculation_the_final_decode_starts_when_the_turn_ends(speculate_ms):
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=speculate_ms)
    seen: list[object] = []
    await push_all(listener, rec, quiet(5) + speech(50) + quiet(20), seen)
    assert rec.calls == []
    await push_all(listener, rec, quiet(10), seen)
    await asyncio.wait_for(rec.called.wait(), 1.0)
    assert len(rec.calls) == 1 and rec.calls[0].at_frame == 80  # the frame that ended it
    rec.calls[0].release.set()
    final = await asyncio.wait_for(next_event(listener.events(), FinalTranscript), 1.0)
    assert isinstance(final, FinalTranscript) and not final.speculative
    await listener.close()


async def test_a_segment_too_short_to_decode_is_reported_skipped():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=TurnOptions(
        stop_ms=500, start_ms=60, pre_speech_ms=0, post_speech_ms=0), partials=False,
        min_final_seconds=0.25, speculate_ms=200)
    seen: list[object] = []
    await push_all(listener, rec, speech(5) + quiet(30), seen)  # 100 ms: a click
    assert rec.calls == []  # neither speculated nor decoded
    skipped = await asyncio.wait_for(next_event(listener.events(), SegmentSkipped), 1.0)
    assert isinstance(skipped, SegmentSkipped) and skipped.turn == 1
    await listener.close()


async def test_a_speculative_decode_that_fails_is_reported_as_the_turns_failure():
    class Failing(HeldRecognizer):
        async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
            from gateway.listen.asr import RecognitionError

            self.calls.append(Call(len(audio16k), final, self.frames))
            raise RecognitionError("server down")

    from gateway.listen.listener import TranscriptionFailed

    rec = Failing()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    await push_all(listener, rec, quiet(5) + speech(50) + quiet(30), [])
    failed = await asyncio.wait_for(next_event(listener.events(), TranscriptionFailed), 1.0)
    assert isinstance(failed, TranscriptionFailed) and "server down" in str(failed.error)
    assert len(rec.calls) == 1  # the speculation's failure, not a second try
    await listener.close()



async def until_final(listener: Listener) -> list[object]:
    """The events in the order they were queued, up to and with the final transcript."""
    seen = []
    async for event in listener.events():
        if not isinstance(event, BargeIn):  # (300 ms voiced: said whatever the rest)
            seen.append(event)
        if isinstance(event, FinalTranscript):
            break
    return seen


async def test_a_speculation_decoded_before_the_turn_ends_is_announced_tentative():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    await push_all(listener, rec, quiet(5) + speech(50) + quiet(10), [])
    rec.calls[0].release.set()
    await push_all(listener, rec, quiet(15), [])  # decoded, then the turn ends
    events = await asyncio.wait_for(until_final(listener), 1.0)
    assert [type(e).__name__ for e in events] == [
        "SpeechStarted", "TentativeTranscript", "SpeechStopped", "FinalTranscript"]
    tentative, final = events[1], events[3]
    assert isinstance(tentative, TentativeTranscript) and isinstance(final, FinalTranscript)
    assert (tentative.turn, tentative.text) == (final.turn, final.text) == (1, "call 1")
    assert final.speculative
    await listener.close()


async def test_no_tentative_for_a_speculation_the_user_talked_over():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    await push_all(listener, rec, quiet(5) + speech(40) + quiet(15), [])
    await push_all(listener, rec, speech(30), [])  # the user goes on: call 1 dropped
    rec.calls[0].release.set()
    await push_all(listener, rec, quiet(10), [])
    rec.calls[1].release.set()
    await push_all(listener, rec, quiet(20), [])
    events = await asyncio.wait_for(until_final(listener), 1.0)
    tentatives = [e.text for e in events if isinstance(e, TentativeTranscript)]
    assert rec.calls[0].cancelled and tentatives == ["call 2"]
    assert events[-1].text == "call 2"
    await listener.close()


async def test_a_speculation_decoded_after_the_turn_ended_is_not_tentative():
    rec = HeldRecognizer()
    listener = Listener(rec, vad=LoudIsSpeech(), turns=options(), partials=False,
                        speculate_ms=200)
    await push_all(listener, rec, quiet(5) + speech(50) + quiet(30), [])  # the turn ends
    rec.calls[0].release.set()
    events = await asyncio.wait_for(until_final(listener), 1.0)
    assert [type(e).__name__ for e in events] == [
        "SpeechStarted", "SpeechStopped", "FinalTranscript"]
    await listener.close()
