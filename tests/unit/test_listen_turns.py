"""The turn detector's rules on synthetic frame sequences (probabilities given, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.listen.turns import (
    BargeIn,
    SpeechStarted,
    SpeechStopped,
    State,
    TurnDetector,
    TurnOptions,
)

FRAME = 320


def frame(index: int) -> np.ndarray:
    """A frame whose samples all hold its index, so segments can be checked frame by frame."""
    return np.full(FRAME, index % 30000, dtype=np.int16)


def ms(n: int, p: float) -> list[float]:
    return [p] * (n // 20)


def run(probs: list[float], det: TurnDetector | None = None, *, flush: bool = False):
    det = det or TurnDetector()
    events = []
    for i, p in enumerate(probs):
        for ev in det.push(frame(i), p):
            events.append((i, ev))
    if flush:
        events += [(len(probs), ev) for ev in det.flush()]
    return det, events


def kinds(events) -> list[str]:
    return [type(ev).__name__ for _, ev in events]


def frames_in(audio: np.ndarray) -> list[int]:
    return [int(v) for v in audio.reshape(-1, FRAME)[:, 0]]


def test_speech_starts_after_200_ms_voiced_and_dates_from_the_first_voiced_frame():
    det, events = run(ms(500, 0.0) + ms(180, 0.9))
    assert events == [] and det.state is State.STARTING
    det, events = run(ms(500, 0.0) + ms(200, 0.9))
    assert kinds(events) == ["SpeechStarted"]
    index, started = events[0]
    assert index == 25 + 9
    assert started.at == pytest.approx(0.5) and started.confirmed_at == pytest.approx(0.7)
    assert det.in_speech and det.started_at == pytest.approx(0.5)


def test_pause_inside_a_sentence_is_one_turn():
    probs = ms(400, 0) + ms(800, 0.9) + ms(300, 0.05) + ms(700, 0.9) + ms(600, 0)
    _, events = run(probs)
    assert kinds(events) == ["SpeechStarted", "BargeIn", "SpeechStopped"]
    stopped = events[-1][1]
    assert isinstance(stopped, SpeechStopped) and stopped.reason == "silence"
    assert stopped.started_at == pytest.approx(0.4)
    assert stopped.at == pytest.approx(0.4 + 0.8 + 0.3 + 0.7)
    assert stopped.duration == pytest.approx(1.8)


def test_turn_ends_after_the_configured_silence():
    probs = ms(200, 0) + ms(600, 0.9) + ms(480, 0)
    _, events = run(probs)
    assert "SpeechStopped" not in kinds(events)
    _, events = run(probs + ms(20, 0))
    assert kinds(events)[-1] == "SpeechStopped"
    assert events[-1][1].detected_at == pytest.approx(0.2 + 0.6 + 0.5)
    _, events = run(ms(200, 0) + ms(600, 0.9) + ms(300, 0),
                    TurnDetector(TurnOptions(stop_ms=300)))
    assert kinds(events)[-1] == "SpeechStopped"


def test_segment_keeps_300_ms_before_and_200_ms_after_the_speech():
    probs = ms(1000, 0) + ms(600, 0.9) + ms(600, 0)
    _, events = run(probs)
    audio = events[-1][1].audio
    kept = frames_in(audio)
    first_voiced, last_voiced = 50, 50 + 30 - 1
    assert kept == list(range(first_voiced - 15, last_voiced + 1 + 10))
    assert len(audio) == (15 + 30 + 10) * FRAME


def test_pre_speech_pad_is_cut_at_the_start_of_the_stream():
    _, events = run(ms(100, 0) + ms(400, 0.9) + ms(600, 0))
    assert frames_in(events[-1][1].audio)[0] == 0


def test_segment_audio_grows_while_speaking_for_partial_decodes():
    det, _ = run(ms(400, 0) + ms(200, 0.9))
    assert len(det.segment_audio()) == (15 + 10) * FRAME
    det.push(frame(99), 0.9)
    assert len(det.segment_audio()) == 26 * FRAME
    assert frames_in(det.segment_audio())[-1] == 99
    assert len(TurnDetector().segment_audio()) == 0


def test_100_ms_noise_burst_starts_nothing_and_does_not_barge_in():
    probs = ms(500, 0) + ms(100, 1.0) + ms(500, 0) + ms(100, 0.8) + ms(40, 0) + ms(60, 0.9)
    det, events = run(probs + ms(500, 0))
    assert events == []
    assert det.state is State.IDLE


def test_barge_in_after_300_ms_voiced_once_per_turn():
    _, events = run(ms(200, 0) + ms(280, 0.9))
    assert kinds(events) == ["SpeechStarted"]
    _, events = run(ms(200, 0) + ms(300, 0.9) + ms(2000, 0.9))
    assert kinds(events) == ["SpeechStarted", "BargeIn"]
    index, barge = events[1]
    assert isinstance(barge, BargeIn)
    assert index == 10 + 14
    assert barge.voiced == pytest.approx(0.3) and barge.at == pytest.approx(0.5)
    assert barge.started_at == pytest.approx(0.2)


def test_barge_in_counts_voiced_time_not_pauses():
    # 200 ms voiced, a 200 ms pause, 80 ms voiced: 280 ms voiced in all -> no barge-in yet.
    _, events = run(ms(200, 0.9) + ms(200, 0) + ms(80, 0.9))
    assert kinds(events) == ["SpeechStarted"]
    _, events = run(ms(200, 0.9) + ms(200, 0) + ms(100, 0.9))
    assert kinds(events) == ["SpeechStarted", "BargeIn"]


def test_barge_in_threshold_is_configurable_and_may_be_below_the_start():
    _, events = run(ms(200, 0.9), TurnDetector(TurnOptions(barge_in_ms=100)))
    assert kinds(events) == ["SpeechStarted", "BargeIn"]
    _, events = run(ms(600, 0.9), TurnDetector(TurnOptions(barge_in_ms=600)))
    assert kinds(events) == ["SpeechStarted", "BargeIn"] and events[1][0] == 29


def test_short_dips_do_not_restart_the_start_count_but_long_gaps_do():
    dips = [0.9, 0.9, 0.9, 0.1] * 3 + [0.9]  # 10 voiced frames with 20 ms dips
    _, events = run(dips)
    assert kinds(events) == ["SpeechStarted"] and events[0][1].at == 0.0
    gap = ms(100, 0.9) + ms(80, 0.0) + ms(100, 0.9) + ms(500, 0)
    _, events = run(gap)
    assert events == []


def test_hysteresis_keeps_speech_going_at_lower_probability():
    probs = ms(300, 0.9) + ms(700, 0.4) + ms(500, 0.2)
    _, events = run(probs)
    assert kinds(events) == ["SpeechStarted", "BargeIn", "SpeechStopped"]
    assert events[-1][1].at == pytest.approx(1.0)
    _, events = run(ms(300, 0.9) + ms(700, 0.4), TurnDetector(TurnOptions(release=0.5)))
    assert kinds(events)[-1] == "SpeechStopped"


def test_probabilities_below_the_threshold_never_start():
    det, events = run(ms(2000, 0.45))
    assert events == [] and det.state is State.IDLE


def test_max_turn_length_cuts_and_carries_on_without_repeating_audio():
    det = TurnDetector(TurnOptions(max_turn_ms=1000))
    _, events = run(ms(1500, 0.9) + ms(600, 0), det)
    assert kinds(events) == ["SpeechStarted", "BargeIn", "SpeechStopped", "SpeechStarted",
                             "BargeIn", "SpeechStopped"]
    first, second = events[2][1], events[5][1]
    assert first.reason == "max_length" and second.reason == "silence"
    assert first.at == pytest.approx(1.0) and events[3][1].at == pytest.approx(1.0)
    assert frames_in(first.audio) == list(range(50))
    assert frames_in(second.audio)[0] == 50
    assert set(frames_in(first.audio)).isdisjoint(frames_in(second.audio))


def test_max_turn_length_during_silence_just_ends():
    det = TurnDetector(TurnOptions(max_turn_ms=1000, stop_ms=2000))
    _, events = run(ms(400, 0.9) + ms(1000, 0), det)
    assert kinds(events) == ["SpeechStarted", "BargeIn", "SpeechStopped"]
    assert events[-1][1].reason == "max_length" and det.state is State.IDLE


def test_flush_ends_a_turn_in_progress_only():
    _, events = run(ms(500, 0.9), flush=True)
    assert kinds(events)[-1] == "SpeechStopped" and events[-1][1].reason == "flush"
    det, events = run(ms(100, 0.9), flush=True)
    assert events == [] and det.state is State.IDLE


def test_two_turns_and_reset():
    probs = ms(400, 0.9) + ms(600, 0) + ms(400, 0.9) + ms(600, 0)
    det, events = run(probs)
    assert kinds(events) == ["SpeechStarted", "BargeIn", "SpeechStopped"] * 2
    assert events[3][1].at == pytest.approx(1.0)
    det.reset()
    assert det.now == 0.0 and det.state is State.IDLE


def test_time_is_stream_time():
    det, _ = run(ms(1000, 0))
    assert det.now == pytest.approx(1.0)


def test_wrong_frame_size_and_bad_options_are_refused():
    with pytest.raises(ValueError, match="320 samples"):
        TurnDetector().push(np.zeros(160, dtype=np.int16), 0.0)
    for bad in ({"threshold": 0.0}, {"release": 0.9, "threshold": 0.5}, {"stop_ms": 0},
                {"pre_speech_ms": -1}, {"frame_ms": 0}, {"rate": 11025},
                {"max_turn_ms": 100}):
        with pytest.raises(ValueError):
            TurnOptions(**bad)


def test_events_are_the_documented_types():
    _, events = run(ms(400, 0.9) + ms(600, 0))
    assert isinstance(events[0][1], SpeechStarted)
    assert isinstance(events[-1][1].audio, np.ndarray)
    assert events[-1][1].audio.dtype == np.int16


def test_trailing_silence_is_exposed_while_speaking():
    det, _ = run(ms(400, 0.9) + ms(100, 0))
    assert det.silence == pytest.approx(0.1)
    det.push(frame(0), 0.9)
    assert det.silence == 0.0
    assert TurnDetector().silence == 0.0
