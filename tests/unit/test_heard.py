"""The one definition of heard (gateway.media.sink): a delivery's sends and a listener's delay."""

from dataclasses import dataclass

import pytest

from gateway.media.sink import FRAME_S, played, played_ms


@dataclass
class Sent:
    frames: int
    first_at: float | None
    last_at: float | None


@dataclass
class Sink:
    delay: float | None
    name: str = "s"

    def listener_delay_s(self):
        return self.delay

    def record_sent(self):
        pass


def paced(frames, start=10.0):
    return Sent(frames, start, start + (frames - 1) * FRAME_S)


def test_nothing_sent_nothing_heard():
    assert played_ms(Sent(0, None, None), 0.05, 100.0) == 0.0


def test_nothing_heard_before_the_delay_has_passed():
    assert played_ms(paced(50), 0.1, 10.05) == 0.0


def test_paced_stream_is_heard_in_real_time_behind_the_delay():
    sent = paced(100)  # 2 s of audio, sends still going
    assert played_ms(sent, 0.1, 10.1 + 0.5) == pytest.approx(500.0)


def test_never_more_than_was_sent():
    sent = paced(10)  # 200 ms sent, then nothing (the utterance ended)
    assert played_ms(sent, 0.05, 20.0) == pytest.approx(200.0)


def test_a_send_pause_holds_the_playout_back():
    # 10 frames sent from t=10, then the sink stalled: the 11th..20th left 1 s late
    sent = Sent(20, 10.0, 11.0 + 9 * FRAME_S)
    # at t=11.1 (delay 0): by the clock 1.1 s, but only the frames sent by then have played
    assert played_ms(sent, 0.0, 11.1) == pytest.approx(20 * 20 - (11.18 - 11.1) * 1000, abs=1e-6)
    assert played_ms(sent, 0.0, 11.1) < 1100


def test_unknown_delay_claims_nothing():
    assert played(paced(10), Sink(None), 100.0) is None


def test_heard_reports_sent_and_played():
    h = played(paced(50), Sink(0.0), 10.0 + 0.5)
    assert h is not None and not h.exact
    assert h.played_ms == pytest.approx(500.0)
    assert h.sent_ms == pytest.approx(1000.0)


def test_a_conversation_never_reports_less_heard_than_before():
    """The listener's delay follows each RTT sample, so a receiver report read late (a long
    RTT) would move the played position back behind words already published as heard, or a
    cut below them: ``Conversation.played_ms`` keeps the furthest position per utterance
    until the utterance ends."""
    from gateway.conversation.conversation import Conversation
    from gateway.media.opus_codec import EncoderSettings
    from gateway.speech.utterance import Utterance, UtteranceState

    conversation = Conversation(EncoderSettings())
    sink = Sink(0.05)
    conversation.sinks["s"] = sink  # type: ignore[assignment]
    utterance = Utterance("some words", "tone")
    utterance.state = UtteranceState.PLAYING
    delivery = utterance.delivery("s")
    delivery.frames, delivery.first_at, delivery.last_at = 50, 10.0, 10.98
    first = conversation.played_ms(utterance, now=11.0)
    assert first == pytest.approx(950.0)
    sink.delay = 0.35  # one long RTT sample
    assert played(delivery, sink, 11.0).played_ms == pytest.approx(650.0)  # (what it computes)
    assert conversation.played_ms(utterance, now=11.0) == pytest.approx(first)
    assert conversation.played_ms(utterance, now=11.25) == pytest.approx(first)
    assert conversation.played_ms(utterance, now=11.4) == pytest.approx(1000.0)  # on again
    utterance.state = UtteranceState.DONE
    conversation._on_utterance(utterance, UtteranceState.DONE)
    assert utterance not in conversation._played  # (kept until it ends, no longer)
