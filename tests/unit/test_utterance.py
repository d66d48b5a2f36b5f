import asyncio

from gateway.speech.utterance import Utterance, UtteranceState


async def test_finished_event_is_made_on_demand_and_reflects_the_final_state():
    waited = Utterance(text="hello", voice="tone")
    event = waited.finished  # someone waits before it ends
    assert not event.is_set()
    waited.finish(UtteranceState.DONE)
    assert event.is_set() and waited.finished is event

    unwatched = Utterance(text="hello", voice="tone")
    unwatched.finish(UtteranceState.INTERRUPTED)
    assert unwatched._finished is None  # nobody asked: no Event was made
    assert unwatched.finished.is_set()  # asked later: already set
    assert unwatched.text == "" and unwatched.as_json()["chars"] == 5


async def test_owner_callback_runs_after_the_sink_and_cannot_break_it():
    """A sink's send tick finishes the utterance; the owner's work (phrase cache, counters) runs
    after the tick, and an exception in it reaches neither the sink nor the utterance."""
    calls = []

    def on_finish(u):
        calls.append(u.state)
        raise RuntimeError("owner bug")

    u = Utterance(text="hello", voice="tone", on_finish=on_finish)
    delivery = u.delivery("rtp")
    u.all_queued(1)
    delivery.on_frame_sent(0, 1, 960, 0.0)  # what the sink's tick calls: must not raise
    assert u.state is UtteranceState.DONE and calls == []
    await asyncio.sleep(0)
    assert calls == [UtteranceState.DONE]


def test_no_sink_at_all_is_done_once_queued():
    u = Utterance(text="hello", voice="tone")
    u.all_queued(0)
    assert u.state is UtteranceState.DONE
