"""Word events are scheduled from the listener's played position, on one re-armed timer: a
fake clock and a fake played position drive ``WordEvents`` (gateway.conversation.words)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.conversation.words import MIN_WAIT_S, POLL_S, WordEvents
from gateway.media.sink import played_ms
from gateway.speech.utterance import Utterance, UtteranceState
from gateway.text.timing import WordTiming

DELAY_S = 0.06


class Clock:
    def __init__(self) -> None:
        self.t = 100.0
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, when: float, callback: Callable[[], None]) -> None:
        self.timers.append((when, callback))

    def run_until(self, t: float) -> None:
        """Fire every timer due by ``t``, in time order (at its own time)."""
        while True:
            due = sorted((w, i) for i, (w, _) in enumerate(self.timers) if w <= t)
            if not due:
                break
            when, i = due[0]
            _, callback = self.timers.pop(i)
            self.t = max(self.t, when)
            callback()
        self.t = t


def playing(words: list[tuple[str, float, float]], frames: int) -> Utterance:
    utterance = Utterance(" ".join(w for w, _, _ in words), "tone")
    utterance.words = [WordTiming(w, s, e) for w, s, e in words]
    utterance.state = UtteranceState.PLAYING
    utterance.total_frames = frames or None  # synthesis ended (0: still under way)
    return utterance


def harness(clock: Clock, delay_s: float | None = DELAY_S):
    events: list[tuple[str, str, float]] = []  # (utterance, word, published at)
    wakes: list[float] = []

    def played(utterance: Utterance, now: float) -> float | None:
        if delay_s is None:
            return None
        return played_ms(utterance.primary, delay_s, now)

    def schedule(when: float, callback: Callable[[], None]) -> None:
        wakes.append(when)
        clock.schedule(when, callback)

    words = WordEvents(lambda u, w: events.append((u.id, w.word, clock.t)), played,
                       clock=lambda: clock.t, schedule=schedule)
    return words, events, wakes


def send_paced(utterance: Utterance, start: float, frames: int) -> None:
    """All ``frames`` as a paced sink sends them: one per 20 ms from ``start``."""
    delivery = utterance.delivery("rtp")
    for i in range(frames):
        delivery.on_frames_sent(i, 1, i, i * 480, start + i * 0.02)


def test_each_word_is_published_once_its_start_has_been_played() -> None:
    clock = Clock()
    words, events, wakes = harness(clock)
    u = playing([("one", 0, 200), ("two", 300, 500), ("three", 600, 900)], 50)
    send_paced(u, clock.t, 50)  # 1 s of audio, first frame at t0
    t0 = clock.t
    words.follow(u)
    clock.run_until(t0 + 2.0)
    assert [w for _, w, _ in events] == ["one", "two", "three"]
    for (_, _, at), start_ms in zip(events, (0, 300, 600), strict=True):
        heard_at = t0 + DELAY_S + start_ms / 1000
        assert heard_at - 1e-9 <= at <= heard_at + MIN_WAIT_S  # not before, and soon after
    assert words.following == 0  # all published: nothing armed any more
    # one timer re-armed per word, plus a few looks while the first frame is on its way to
    # the listener: far fewer than one per frame (50)
    assert len(wakes) <= 3 + round(DELAY_S / MIN_WAIT_S) + 3


def test_a_word_not_yet_sent_waits_for_its_frames() -> None:
    """Played is bounded by what was sent: a stalled send (or a held playout) holds words."""
    clock = Clock()
    words, events, _ = harness(clock)
    u = playing([("a", 0, 100), ("b", 400, 500)], 0)
    t0 = clock.t
    send_paced(u, t0, 10)  # only 200 ms sent, then nothing
    words.follow(u)
    clock.run_until(t0 + 3.0)
    assert [w for _, w, _ in events] == ["a"]
    delivery = u.delivery("rtp")
    for i in range(10, 30):  # the rest, late
        delivery.on_frames_sent(i, 1, i, i * 480, t0 + 3.0 + (i - 10) * 0.02)
    clock.run_until(t0 + 5.0)
    assert [w for _, w, _ in events] == ["a", "b"]
    b_at = events[1][2]
    assert b_at >= t0 + 3.0 + 0.2 + DELAY_S - 1e-9  # its frame went out late: heard late


def test_nothing_before_the_first_frame_and_words_that_come_later_are_followed() -> None:
    clock = Clock()
    words, events, wakes = harness(clock)
    u = playing([], 0)
    t0 = clock.t
    words.follow(u)
    clock.run_until(t0 + 0.5)
    assert events == [] and wakes[-1] - wakes[-2] >= POLL_S - 1e-9  # polling, slowly
    send_paced(u, clock.t, 50)
    first = clock.t
    clock.run_until(first + 0.3)
    u.words.extend([WordTiming("late", 100, 200), WordTiming("words", 250, 400)])
    u.total_frames = 50
    clock.run_until(first + 2.0)
    assert [w for _, w, _ in events] == ["late", "words"]
    assert words.following == 0


def test_an_interrupt_publishes_the_heard_words_and_none_after() -> None:
    clock = Clock()
    words, events, _ = harness(clock)
    u = playing([("one", 0, 200), ("two", 300, 500), ("three", 600, 900)], 50)
    t0 = clock.t
    send_paced(u, t0, 50)
    words.follow(u)
    clock.run_until(t0 + DELAY_S + 0.25)
    assert [w for _, w, _ in events] == ["one"]
    u.state = UtteranceState.INTERRUPTED
    words.cut(u, 350)  # "two" began before the cut; "three" did not
    clock.run_until(t0 + 5)
    assert [w for _, w, _ in events] == ["one", "two"]


def test_interrupted_state_alone_stops_the_words() -> None:
    clock = Clock()
    words, events, _ = harness(clock)
    u = playing([("one", 0, 200), ("two", 300, 500)], 50)
    t0 = clock.t
    send_paced(u, t0, 50)
    words.follow(u)
    clock.run_until(t0 + DELAY_S + 0.1)
    u.state = UtteranceState.INTERRUPTED
    clock.run_until(t0 + 5)
    assert [w for _, w, _ in events] == ["one"] and words.following == 0


def test_an_unknown_listener_position_claims_no_words() -> None:
    clock = Clock()
    words, events, _ = harness(clock, delay_s=None)
    u = playing([("one", 0, 200)], 50)
    send_paced(u, clock.t, 50)
    words.follow(u)
    clock.run_until(clock.t + 5)
    assert events == [] and words.following == 0


def test_close_cancels_what_was_armed() -> None:
    clock = Clock()
    words, events, _ = harness(clock)
    u = playing([("one", 0, 200), ("two", 300, 500)], 50)
    t0 = clock.t
    send_paced(u, t0, 50)
    words.follow(u)
    clock.run_until(t0 + DELAY_S + 0.1)
    words.close()
    words.follow(u)  # after close: ignored
    clock.run_until(t0 + 5)
    assert [w for _, w, _ in events] == ["one"] and words.following == 0


def test_two_utterances_share_one_timer_and_keep_their_order() -> None:
    clock = Clock()
    words, events, wakes = harness(clock)
    a = playing([("a1", 0, 100), ("a2", 200, 300)], 20)
    b = playing([("b1", 0, 100), ("b2", 200, 300)], 20)
    t0 = clock.t
    send_paced(a, t0, 20)
    words.follow(a)
    words.follow(b)  # queued behind a: no frame sent yet
    clock.run_until(t0 + 0.4)
    send_paced(b, t0 + 0.4, 20)  # b starts after a's 400 ms
    clock.run_until(t0 + 3)
    assert [w for _, w, _ in events] == ["a1", "a2", "b1", "b2"]
    assert len(wakes) <= 4 + 2 * (round(DELAY_S / MIN_WAIT_S) + 3)  # not one per frame (40)


def test_no_word_listener_no_wake_up_and_a_late_listener_gets_the_words_from_then_on() -> None:
    clock = Clock()
    listening = [False]
    events: list[tuple[str, str, float]] = []
    wakes: list[float] = []

    def schedule(when: float, callback: Callable[[], None]) -> None:
        wakes.append(when)
        clock.schedule(when, callback)

    words = WordEvents(lambda u, w: events.append((u.id, w.word, clock.t)),
                       lambda u, now: played_ms(u.primary, DELAY_S, now),
                       clock=lambda: clock.t, schedule=schedule, wanted=lambda: listening[0])
    u = playing([("one", 0, 200), ("two", 300, 500), ("three", 600, 900)], 50)
    t0 = clock.t
    send_paced(u, t0, 50)
    words.follow(u)
    clock.run_until(t0 + DELAY_S + 0.45)  # "one" and "two" heard, by nobody
    assert wakes == [] and events == [] and words.following == 1  # no work at all
    listening[0] = True
    words.resume()
    clock.run_until(t0 + 2.0)
    assert [w for _, w, _ in events] == ["three"]  # not the two heard before the listener came
    assert words.following == 0


def test_the_last_listener_leaving_stops_the_wake_ups() -> None:
    clock = Clock()
    listening = [True]
    wakes: list[float] = []

    def schedule(when: float, callback: Callable[[], None]) -> None:
        wakes.append(when)
        clock.schedule(when, callback)

    words = WordEvents(lambda u, w: None, lambda u, now: played_ms(u.primary, DELAY_S, now),
                       clock=lambda: clock.t, schedule=schedule, wanted=lambda: listening[0])
    u = playing([("one", 0, 200), ("two", 1300, 1500)], 100)
    send_paced(u, clock.t, 100)
    words.follow(u)
    clock.run_until(clock.t + 0.2)
    listening[0] = False
    clock.run_until(clock.t + 0.1)
    armed = len(wakes)
    clock.run_until(clock.t + 3.0)
    assert len(wakes) == armed and not clock.timers  # nothing re-armed while nobody listens


def test_the_event_bus_says_who_wants_words_and_spares_the_others() -> None:
    from gateway.conversation.events import EventBus

    bus = EventBus()
    told: list[str] = []
    bus.on_words_wanted = lambda: told.append("wanted")
    plain: list[str] = []
    bus.on_event(lambda e: plain.append(e.type), words=False)
    assert not bus.wants_words and told == []
    bus.publish("word", word="x")
    bus.publish("utterance", id="u", state="playing")
    assert plain == ["utterance"]  # a words=False listener is never handed a word
    sub = bus.subscribe()
    assert bus.wants_words and told == ["wanted"]
    sub.close()
    assert not bus.wants_words
    wordy: list[str] = []
    bus.on_event(lambda e: wordy.append(e.type))
    assert bus.wants_words and told == ["wanted", "wanted"]
    bus.publish("word", word="y")
    assert wordy == ["word"]


async def test_one_ticker_callback_runs_every_conversation_due_on_a_tick() -> None:
    import asyncio

    from gateway.conversation.words import word_pass
    from gateway.media.ticker import Ticker

    ticker = Ticker(0.0025, loop=asyncio.get_running_loop())
    pass_ = word_pass(ticker)
    fired: list[int] = []

    class Words:
        def __init__(self, n: int) -> None:
            self.n = n

        def _fire(self, generation: int) -> None:
            fired.append(self.n)

    when = ticker.now() + 0.01
    for n in range(50):
        pass_.schedule(when, Words(n), 0)  # type: ignore[arg-type]
    assert ticker.waiting == 1 and pass_.waiting == 50  # one ticker entry for all of them
    await asyncio.sleep(0.03)
    assert fired == list(range(50)) and pass_.runs == 1 and pass_.passes == 50
    assert word_pass(ticker) is pass_


def test_a_conversation_follows_the_bus_put_in_its_place() -> None:
    from gateway.conversation.conversation import Conversation
    from gateway.conversation.events import EventBus
    from gateway.media.opus_codec import EncoderSettings

    conversation = Conversation(EncoderSettings())
    first = conversation.events
    assert not first.wants_words and not conversation._wants_words()
    bus = EventBus()
    conversation.events = bus
    assert first.on_words_wanted is None and bus.on_words_wanted == conversation.words.resume
    bus.subscribe()
    assert conversation._wants_words()
