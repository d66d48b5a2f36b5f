"""Semantic end of turn: the listener asks a turn model about each pause and its verdict sets the
silence that ends the turn -- short when complete, the cap when not; a verdict for a pause the
user has ended is ignored; the speculative transcript can overrule. A fake model (its answer
given, held until the test releases it) and a scripted VAD: the frame each turn ends on is
exact."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from gateway.listen.asr import Transcript
from gateway.listen.listener import Listener, TentativeTranscript
from gateway.listen.turn_model import TurnJudge, Verdict
from gateway.listen.turns import (
    SemanticEndpointing,
    SemanticOptions,
    SpeechStopped,
    TurnOptions,
    dangling,
)

FRAME = 320


class LoudIsSpeech:
    name = "loud"

    def probability(self, frame: np.ndarray) -> float:
        return 0.9 if np.abs(frame).max() > 1000 else 0.05

    def reset(self) -> None:
        return None


class FakeModel:
    """Answers ``answer``; while ``hold`` is clear, the inference waits (on its thread)."""

    name = "fake"

    def __init__(self, answer: float) -> None:
        self.answer = answer
        self.hold = threading.Event()
        self.hold.set()
        self.calls: list[int] = []  # samples of each request

    def probability(self, audio16k: np.ndarray) -> float:
        self.calls.append(len(audio16k))
        assert self.hold.wait(10)
        return self.answer


class TextRecognizer:
    """Every decode returns ``text`` at once."""

    name = "text"

    def __init__(self, text: str) -> None:
        self.text = text

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        return Transcript(self.text, final, len(audio16k) / 16_000)

    async def close(self) -> None:
        return None


def speech(frames: int) -> list[np.ndarray]:
    return [np.full(FRAME, 8000, dtype=np.int16)] * frames


def quiet(frames: int) -> list[np.ndarray]:
    return [np.zeros(FRAME, dtype=np.int16)] * frames


def make(model: FakeModel, *, text: str | None = None,
         semantic: SemanticOptions | None = None) -> Listener:
    # silence alone would end a turn after 500 ms; start after 100 ms voiced
    turns = TurnOptions(stop_ms=500, post_speech_ms=100, start_ms=100)
    return Listener(TextRecognizer(text or "hello there"), vad=LoudIsSpeech(), turns=turns,
                    partials=False, speculate_ms=None if text is None else 100,
                    turn_model=model, semantic=semantic)


async def push(listener: Listener, frames: list[np.ndarray], stopped: list[SpeechStopped],
               *, settle: bool = True) -> None:
    """Frame by frame, as the loop would; ``settle``: each frame's model verdict (and
    speculation) delivered before the next frame comes (a fast model)."""
    for f in frames:
        stopped += [e for e in listener.push(f) if isinstance(e, SpeechStopped)]
        await asyncio.sleep(0)
        if settle and listener._judge is not None:
            await listener._judge.idle()
            await asyncio.sleep(0)
            await asyncio.sleep(0)


async def drain_stops(listener: Listener) -> list[SpeechStopped]:
    """Every SpeechStopped queued so far (those returned by push, and those a verdict made
    between frames)."""
    out = []
    while not listener._events.empty():
        event = listener._events.get_nowait()
        if isinstance(event, SpeechStopped):
            out.append(event)
    return out


async def test_a_complete_verdict_ends_the_turn_after_200_ms_of_silence():
    model = FakeModel(0.9)
    listener = make(model)
    stopped: list[SpeechStopped] = []
    await push(listener, quiet(5) + speech(40) + quiet(30), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].reason == "semantic"
    assert stops[0].detected_at - stops[0].at == pytest.approx(0.2)
    assert len(model.calls) == 1  # asked once, at 60 ms into the pause
    # the segment so far: what came before (within the pre-speech pad), the speech, 60 ms
    # of the pause
    assert model.calls[0] == (5 + 40 + 3) * FRAME
    assert listener.turn_detector == "fake"
    await listener.close()


async def test_an_incomplete_verdict_waits_for_the_cap():
    # (no transcript: the model alone; with one that could end there, see test_the_policy)
    listener = make(FakeModel(0.1))
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(59), stopped)
    assert stopped == [] and await drain_stops(listener) == []
    await push(listener, quiet(1), stopped)  # 1200 ms of silence
    assert len(stopped) == 1
    assert stopped[0].detected_at - stopped[0].at == pytest.approx(1.2)
    await listener.close()


async def test_a_late_verdict_ends_a_long_enough_pause_at_once():
    model = FakeModel(0.9)
    model.hold.clear()
    listener = make(model)
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(20), stopped, settle=False)  # 400 ms quiet
    assert stopped == [] and listener.detector.in_speech
    model.hold.set()
    assert listener._judge is not None
    await listener._judge.idle()
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.4)
    await listener.close()


async def test_a_verdict_on_a_pause_the_user_ended_is_ignored():
    model = FakeModel(0.9)
    model.hold.clear()
    listener = make(model)
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(8) + speech(20), stopped, settle=False)
    model.hold.set()
    assert listener._judge is not None
    await listener._judge.idle()
    assert await drain_stops(listener) == [] and listener.detector.in_speech
    model.answer = 0.1  # the second pause is judged unfinished: the cap
    await push(listener, quiet(30), stopped)
    assert stopped == [] and await drain_stops(listener) == []
    assert len(model.calls) == 2
    await listener.close()


async def test_without_a_model_the_silence_rule_is_unchanged():
    listener = Listener(TextRecognizer("x"), vad=LoudIsSpeech(), partials=False,
                        speculate_ms=None,
                        turns=TurnOptions(stop_ms=500, post_speech_ms=100, start_ms=100))
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(25), stopped)
    assert len(stopped) == 1 and stopped[0].reason == "silence"
    assert stopped[0].detected_at - stopped[0].at == pytest.approx(0.5)
    assert listener.turn_detector == "silence"
    await listener.close()


async def test_the_detector_can_be_switched_per_session():
    listener = make(FakeModel(0.9))
    listener.set_turn_detection(None)
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(25), stopped)
    assert len(stopped) == 1 and stopped[0].detected_at - stopped[0].at == pytest.approx(0.5)
    await drain_stops(listener)
    listener.set_turn_detection(FakeModel(0.9))
    await push(listener, speech(40) + quiet(15), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.2)
    await listener.close()


async def test_a_dangling_transcript_overrules_a_complete_verdict():
    listener = make(FakeModel(0.9), text="I would like to order a")
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(30), stopped)
    tentative = [e for e in list(listener._events._queue) if isinstance(e, TentativeTranscript)]
    assert tentative and tentative[0].text == "I would like to order a"
    assert stopped == [] and not any(isinstance(e, SpeechStopped)
                                     for e in list(listener._events._queue))
    await listener.close()


async def test_an_unsure_verdict_on_a_question_ends_after_question_silence_ms():
    listener = make(FakeModel(0.2), text="What time is it in London?")
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(30), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.3)
    # not a question: the silence detector's own 500 ms
    listener = make(FakeModel(0.2), text="Turn off the lights.")
    await push(listener, speech(40) + quiet(30), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.5)
    # the old setting, through the options
    listener = make(FakeModel(0.2), text="What time is it in London?",
                    semantic=SemanticOptions(probe_ms=100, question_silence_ms=500))
    await push(listener, speech(40) + quiet(30), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.5)
    await listener.close()


async def test_with_the_transcript_the_turn_ends_once_both_agree():
    # the model says complete; the text (a question) agrees: the end waits for both
    listener = make(FakeModel(0.9), text="What time is it?")
    stopped: list[SpeechStopped] = []
    await push(listener, speech(40) + quiet(30), stopped)
    stops = await drain_stops(listener)
    assert len(stops) == 1 and stops[0].detected_at - stops[0].at == pytest.approx(0.2)
    await listener.close()


def test_the_policy():
    policy = SemanticEndpointing(SemanticOptions(min_silence_ms=200, max_silence_ms=1000))
    assert policy.stop_ms() == 1000  # nothing known: the cap
    policy.probability = 0.8
    assert policy.stop_ms() == 500  # complete, the transcript still coming: silence's own
    policy.text = "Turn off the lights."
    assert policy.complete() and policy.stop_ms() == 200
    policy.text = "Turn off the"
    assert not policy.complete() and policy.stop_ms() == 1000  # dangling: the cap
    policy.probability, policy.text = 0.2, "Turn off the lights."
    assert policy.stop_ms() == 500  # unsure: never sooner than silence alone
    policy.text = "What time is it?"
    assert policy.stop_ms() == 300  # unsure of a question: question_silence_ms
    policy.probability = 0.8
    assert policy.stop_ms() == 200  # a question judged complete: as any complete turn
    policy.new_pause()
    policy.probability = 0.2
    assert policy.stop_ms() == 1000  # unfinished, no transcript yet: wait
    policy.text = "Can you tell me the?"
    assert policy.stop_ms() == 1000  # dangling, question mark or not: the cap
    assert SemanticOptions().probe_ms == 60 and SemanticOptions().question_silence_ms == 300
    alone = SemanticEndpointing(SemanticOptions(max_silence_ms=1000, use_text=False))
    alone.probability = 0.9
    assert alone.stop_ms() == 200
    alone.probability = 0.1
    assert alone.stop_ms() == 1000
    assert dangling("I want to, um") and dangling("so...") and not dangling("Yes.")
    with pytest.raises(ValueError):
        SemanticOptions(min_silence_ms=50, probe_ms=100)
    with pytest.raises(ValueError):
        SemanticOptions(question_silence_ms=150)  # sooner than a complete turn's end
    with pytest.raises(ValueError):
        SemanticOptions(question_silence_ms=1500)  # past the cap


async def test_the_judge_runs_one_inference_at_a_time_and_the_latest_request_wins():
    model = FakeModel(0.5)
    model.hold.clear()
    verdicts: list[Verdict] = []
    judge = TurnJudge(model, verdicts.append)
    judge.request("a", np.zeros(100, dtype=np.int16))
    await asyncio.sleep(0.05)
    judge.request("b", np.zeros(200, dtype=np.int16))
    judge.request("c", np.zeros(300, dtype=np.int16))  # replaces "b", never run
    model.hold.set()
    await judge.idle()
    assert [v.key for v in verdicts] == ["a", "c"]
    assert model.calls == [100, 300] and judge.inferences == 2 and judge.replaced == 1
    judge.close()


def test_the_turn_detector_flag_and_its_environment_variable(monkeypatch, capsys):
    from gateway.config import parse_config

    assert parse_config([]).hearing_options().turn_detector == "silence"
    config = parse_config(["--turn-detector", "smart-turn"])
    assert config.hearing_options().turn_detector == "smart-turn"
    monkeypatch.setenv("GATEWAY_TURN_DETECTOR", "smart-turn")
    assert parse_config([]).turn_detector == "smart-turn"
    options = parse_config(["--turn-probe-ms", "100", "--turn-question-silence-ms", "500"]
                           ).hearing_options()
    # the duplex loop's unsure wait and cap are its own (it takes early ends back)
    assert options.semantic_options() == SemanticOptions(
        probe_ms=100, question_silence_ms=500, unsure_silence_ms=350, max_silence_ms=800)
    assert parse_config([]).hearing_options().semantic_options() == SemanticOptions(
        unsure_silence_ms=350, max_silence_ms=800)
    longer = parse_config(["--turn-unsure-silence-ms", "500", "--turn-max-silence-ms", "1200"])
    assert longer.hearing_options().semantic_options() == SemanticOptions()
    monkeypatch.setenv("GATEWAY_TURN_DETECTOR", "psychic")
    with pytest.raises(SystemExit):
        parse_config([])
    assert "GATEWAY_TURN_DETECTOR='psychic'" in capsys.readouterr().err
