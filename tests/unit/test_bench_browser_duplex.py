"""bench.browser_duplex's reading of the page: a turn's end of speech is the microphone's last
speech end before its speech_stopped event, and turns not yet heard are left out."""

from bench.browser_duplex import turn_rows


def test_the_last_speech_end_before_speech_stopped_is_the_turns_end():
    ends = [1000.0, 1800.0, 9000.0]  # 1800: the end of the question (after a pause at 1000)
    turns = [{"turn": 1, "text": "q", "latency": {"endpointing": 500}, "stoppedAt": 2400.0,
              "audibleAt": 2500.0},
             {"turn": 2, "text": "r", "latency": None, "stoppedAt": 9600.0, "audibleAt": None}]
    rows = turn_rows(ends, turns)
    assert [r["turn"] for r in rows] == [1]
    assert rows[0]["end_of_speech_to_audible_ms"] == 700.0
    assert rows[0]["end_to_speech_stopped_ms"] == 600.0
    assert rows[0]["gateway"]["endpointing"] == 500


def test_a_turn_with_no_speech_end_before_it_is_not_measured():
    turns = [{"turn": 1, "text": "q", "latency": {}, "stoppedAt": 50.0, "audibleAt": 90.0}]
    assert turn_rows([100.0], turns) == []
