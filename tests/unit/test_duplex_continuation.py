"""A turn ended too early, taken back (conversation/continuation.py): the user goes on within
a second of their last word, over the reply to the first half -- the reply is cut and kept out
of the history, and both halves are answered as one turn. Scripted with the barge-in tests' rig
(a loud/quiet VAD, a recogniser with a given text, a hand-driven sink)."""

from __future__ import annotations

import asyncio

from gateway.conversation.continuation import continues, joined
from gateway.speech.utterance import UtteranceState
from tests.unit.test_duplex_barge_in import Rig, wait_for


async def first_half(rig: Rig) -> None:
    """Turn 1, "Turn the volume up.", ended by 500 ms of quiet; its reply starts playing."""
    rig.recognizer.text = "Turn the volume up."
    await rig.hear(400, loud=True)
    await rig.hear(560, loud=False)
    await wait_for(lambda: rig.agent.calls and rig.duplex.turns[-1].utterances)
    assert rig.agent.calls, rig.events
    utterance = rig.duplex.turns[-1].utterances[0]
    await wait_for(lambda: len(rig.queue) > 0)
    assert rig.play(3) == 3 and utterance.state is UtteranceState.PLAYING


async def test_going_on_within_a_second_continues_the_turn():
    rig = Rig()
    await first_half(rig)
    first = rig.duplex.turns[-1]
    rig.recognizer.text = "a bit more, please."
    await rig.hear(500, loud=True)  # the second half, over the reply: paused, words -> cut
    await rig.hear(40, loud=False)  # (the paused stretch is decoded at a quiet frame)
    await wait_for(lambda: rig.duplex.barge_ins)
    assert first.utterances[0].state is UtteranceState.INTERRUPTED
    await rig.hear(560, loud=False)
    await wait_for(lambda: len(rig.agent.calls) == 2)
    text, history = rig.agent.calls[1]
    assert text == "Turn the volume up a bit more, please."
    assert history == []  # the first half's reply was nobody's answer: not in the history
    second = rig.duplex.turns[-1]
    assert second.continues == first.number and first.superseded
    assert second.text == text and first.heard_text is None
    assert [d["continues"] for d in rig.of("turn_continued")] == [first.number]
    await rig.close()


async def test_a_later_turn_does_not_continue_and_the_first_keeps_what_was_heard():
    rig = Rig()
    await first_half(rig)
    first = rig.duplex.turns[-1]
    await asyncio.sleep(1.1)  # the user's next words come more than a second later
    rig.recognizer.text = "a bit more, please."
    await rig.hear(500, loud=True)
    await rig.hear(40, loud=False)
    await wait_for(lambda: rig.duplex.barge_ins)
    await rig.hear(560, loud=False)
    await wait_for(lambda: len(rig.agent.calls) == 2)
    text, history = rig.agent.calls[1]
    assert text == "a bit more, please."
    assert first.heard_text is not None  # committed as heard (60 ms of it: no word yet)
    assert [m.content for m in history] == ["Turn the volume up.", first.heard_text][
        : 2 if first.heard_text else 1]
    assert not first.superseded and rig.duplex.turns[-1].continues is None
    assert not rig.of("turn_continued")
    await rig.close()


async def test_a_hm_within_a_second_leaves_the_first_turn_as_it_was():
    rig = Rig()
    await first_half(rig)
    first = rig.duplex.turns[-1]
    rig.recognizer.text = "Hmm."
    await rig.hear(260, loud=True)  # a turn that continues it, if it were answered
    assert rig.conversation.paused
    await rig.hear(700, loud=False)
    await wait_for(lambda: any(t.get("overlap") for t in rig.of("transcript")))
    await asyncio.sleep(0.05)
    assert not rig.conversation.paused and first.utterances[0].state is UtteranceState.PLAYING
    assert len(rig.agent.calls) == 1 and not first.superseded
    assert rig.duplex.turns[-1].continues is None  # settled: nothing waits on it
    for _ in range(200):  # the reply plays to the end: recorded as heard
        if first.heard_text is not None:
            break
        rig.play(10)
        await asyncio.sleep(0.01)
    assert [m.content for m in rig.duplex.history] == ["Turn the volume up.", first.heard_text]
    await rig.close()


def test_continues_and_joined():
    assert continues(10.0, 10.4) and continues(10.0, 11.0) and not continues(10.0, 11.2)
    assert not continues(None, 10.4) and not continues(10.0, 10.4, within_ms=0)
    assert not continues(10.0, 9.9)  # began before the other ended: not a continuation
    assert joined("Turn the volume up.", "a bit more.") == "Turn the volume up a bit more."
    assert joined("Can you tell me?", "the time.") == "Can you tell me? the time."
    assert joined("I want to...", "order.") == "I want to... order."
    assert joined("", "Hello.") == "Hello." and joined("Hi.", " ") == "Hi."
