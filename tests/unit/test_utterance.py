from gateway.speech.speaker import Utterance, UtteranceState


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
