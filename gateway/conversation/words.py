"""Word events: each word of an utterance published when its listener has *heard* it begin.

An utterance knows when each of its words plays on its own timeline (``Utterance.words``:
ms from its first sample, the synthesizer's own timings or estimated, gateway.text.timing).
The conversation knows how far the listener has played it (``Conversation.played_ms``, the one
definition of heard: the primary sink's sends less its ``listener_delay_s``). A word is heard
once the played position passes its ``start_ms``; then, and not when its frame is sent, the
event ``word {"utterance", "word", "start_ms", "end_ms"}`` goes out on the session's events.

One wake-up per conversation, not a task per word or per utterance: ``WordEvents`` keeps a
cursor (the next word's index) for each playing utterance and asks for a single wake-up at the
earliest moment any cursor's next word can be heard, computed from the played position; then
it publishes what was heard and asks again. Played positions are re-read on every wake-up, so
a paused playout (sends held) holds the words back too. The wake-ups of every conversation go
through one ``WordPass`` per shared ticker (gateway.media.ticker, the grid the sends already
wake on): one ticker callback per tick that has any session due, after that tick's sends (so
publishing -- a data-channel message -- never holds a packet back), running every due
session's pass -- not a ticker entry and a closure per session and wake-up.

No listener, no work: ``wanted`` (the conversation's ``EventBus.wants_words``) is asked
before each wake-up; while nobody takes word events (no SSE subscriber, no ``events`` data
channel; the Realtime responder does not take them) nothing is armed and nothing computed
(cursors are still kept: a state change per utterance). When a listener arrives, ``resume``
moves every cursor past what was heard meanwhile without publishing it (a listener that joins
late gets the words from then on, as before) and arms again.

- A sink that cannot tell what its listener played (HTTP ``asap``): no word events claimed.
- An interrupted utterance: the words heard before the cut (``cut``, from the conversation's
  heard position at the cut) and none after; a failed one: none more.
- Bounded: at most ``MAX_UTTERANCES`` cursors (a speaker holds fewer pending utterances), at
  most one wake-up per ``MIN_WAIT_S`` while words are due; ``close`` drops everything, and a
  callback armed before it finds nothing to do.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable

from gateway.media.ticker import Ticker, shared_ticker
from gateway.speech.utterance import Utterance, UtteranceState
from gateway.text.timing import WordTiming

FRAME_MS = 20
POLL_S = 0.05  # no first frame sent yet, or the next word not synthesized yet: look again
MIN_WAIT_S = 0.02  # never re-armed sooner than this (a held playout re-checks at this pace)
MAX_UTTERANCES = 64

Publish = Callable[[Utterance, WordTiming], None]
Played = Callable[[Utterance, float], "float | None"]
Schedule = Callable[[float, Callable[[], None]], None]  # call_at(when, callback)


def _ignore_word(utterance: Utterance, word: WordTiming) -> None:
    return None


def _nothing_played(utterance: Utterance, now: float) -> float | None:
    return None


def _always() -> bool:
    return True


class WordPass:
    """Every conversation's word wake-ups on one ticker: per tick with any due, one callback
    (after the tick's sends) that runs each due ``WordEvents``' pass."""

    __slots__ = ("__weakref__", "_due", "_ticker", "passes", "runs")

    def __init__(self, ticker: Ticker) -> None:
        self._ticker = weakref.ref(ticker)  # (the pass is the ticker's: no cycle with it)
        self._due: dict[int, list[tuple[WordEvents, int]]] = {}  # tick -> (words, generation)
        self.runs = 0  # ticker callbacks run
        self.passes = 0  # conversations' passes run by them

    def schedule(self, when: float, words: WordEvents, generation: int) -> None:
        """Run ``words``' pass (if ``generation`` is still its latest) on the first tick at or
        after ``when``."""
        ticker = self._ticker()
        if ticker is None:
            return
        tick = ticker.tick_at_or_after(when)
        due = self._due.get(tick)
        if due is not None:
            due.append((words, generation))
            return
        self._due[tick] = [(words, generation)]
        ticker.call_after_sends(ticker.time_of(tick), lambda: self._run(tick))

    def _run(self, tick: int) -> None:
        self.runs += 1
        for words, generation in self._due.pop(tick, ()):
            self.passes += 1
            words._fire(generation)

    @property
    def waiting(self) -> int:
        return sum(len(due) for due in self._due.values())


_PASSES: weakref.WeakKeyDictionary[Ticker, WordPass] = weakref.WeakKeyDictionary()


def word_pass(ticker: Ticker | None = None) -> WordPass:
    """The word pass of ``ticker`` (default: the running loop's shared ticker; RuntimeError
    without a running loop)."""
    ticker = shared_ticker() if ticker is None else ticker
    found = _PASSES.get(ticker)
    if found is None:
        found = _PASSES[ticker] = WordPass(ticker)
    return found


class WordEvents:
    """Publishes each followed utterance's words as its listener hears them."""

    def __init__(self, publish: Publish, played: Played,
                 clock: Callable[[], float] = time.monotonic,
                 schedule: Schedule | None = None,
                 wanted: Callable[[], bool] | None = None) -> None:
        """``schedule``: ``call_at(when, callback)`` for the wake-ups (tests; default: the
        running loop's ``WordPass``); ``wanted``: whether anyone takes the events now (default:
        always)."""
        self._publish = publish
        self._played = played
        self._clock = clock
        self._schedule = schedule
        self._wanted = wanted or _always
        self._cursors: dict[Utterance, int] = {}  # next word to publish, in utterance order
        self._armed_at = math.inf  # when the pending callback fires (inf: none pending)
        self._generation = 0  # a callback armed before the latest re-arm (or close) is stale
        self.closed = False
        self.published = 0

    def follow(self, utterance: Utterance) -> None:
        """Publish ``utterance``'s words as they are heard (from its PLAYING on)."""
        if self.closed or utterance in self._cursors:
            return
        if len(self._cursors) >= MAX_UTTERANCES:
            self._cursors.pop(next(iter(self._cursors)))  # the oldest: long since heard
        self._cursors[utterance] = 0
        self._arm(self._clock())

    def cut(self, utterance: Utterance, heard_ms: float) -> None:
        """``utterance`` was interrupted with ``heard_ms`` of it heard: publish the words that
        began before that, and none after."""
        index = self._cursors.pop(utterance, None)
        if index is None or not self._wanted():
            return
        words = utterance.words
        while index < len(words) and words[index].start_ms < heard_ms:
            self._emit(utterance, words[index])
            index += 1

    def drop(self, utterance: Utterance) -> None:
        self._cursors.pop(utterance, None)

    def close(self) -> None:
        self.closed = True
        self._cursors.clear()
        self._generation += 1
        self._armed_at = math.inf
        # the callbacks are the conversation's bound methods: let go of them, so a closed
        # conversation is freed by refcounting (no cycle left for a full collection)
        self._publish = _ignore_word
        self._played = _nothing_played
        self._wanted = _always

    def resume(self) -> None:
        """A word listener arrived: skip what was heard while nobody listened (published to
        no one), then wake up for the rest."""
        if self.closed or not self._cursors:
            return
        self._generation += 1  # whatever was armed: this pass replaces it
        self._armed_at = math.inf
        soonest = self._pass(self._clock(), publish=False)
        if soonest < math.inf:
            self._arm(soonest)

    @property
    def following(self) -> int:
        return len(self._cursors)

    def _emit(self, utterance: Utterance, word: WordTiming) -> None:
        self.published += 1
        self._publish(utterance, word)

    def _arm(self, when: float) -> None:
        if self.closed or when >= self._armed_at:
            return  # the pending callback comes sooner and re-arms for the rest
        if not self._wanted():
            return  # nobody takes word events: nothing armed (``resume`` arms again)
        self._generation += 1
        self._armed_at = when
        generation = self._generation
        schedule = self._schedule
        if schedule is None:
            try:  # the running loop's; after the tick's sends: an event never delays a packet
                word_pass().schedule(when, self, generation)
            except RuntimeError:  # no running loop (unit use): nothing is playing
                self._armed_at = math.inf
            return
        schedule(when, lambda: self._fire(generation))

    def _fire(self, generation: int) -> None:
        if generation != self._generation or self.closed:
            return  # superseded by an earlier arm, or closed
        self._armed_at = math.inf
        if not self._wanted():
            return  # the last word listener left: stop here (``resume`` starts again)
        soonest = self._pass(self._clock())
        if soonest < math.inf:
            self._arm(soonest)

    def _pass(self, now: float, publish: bool = True) -> float:
        """Every cursor advanced to ``now`` (its words published, if ``publish``); the
        soonest moment one needs looking at again (inf: none)."""
        soonest = math.inf
        for utterance, index in list(self._cursors.items()):
            due = self._advance(utterance, index, now, publish)
            if due is None:
                self._cursors.pop(utterance, None)
            elif due < soonest:
                soonest = due
        return soonest

    def _advance(self, utterance: Utterance, index: int, now: float,
                 publish: bool = True) -> float | None:
        """Publish (``publish``) what of ``utterance`` was heard by ``now``; when to look
        again (None: it is finished with)."""
        state = utterance.state
        if state is UtteranceState.INTERRUPTED or state is UtteranceState.FAILED:
            return None
        delivery = utterance.primary
        if delivery is None:
            return None if state is UtteranceState.DONE else now + POLL_S
        played = self._played(utterance, now)
        if played is None:
            return None  # its listener's position is unknown: nothing is claimed
        words = utterance.words
        total = utterance.total_frames  # set once synthesis ended: the words are final
        # DONE: every frame this sink will send is sent; once they are all played, so are
        # the words (and a sink that left early stops here rather than waiting for ever)
        played_all = (state is UtteranceState.DONE
                      and played >= delivery.frames * FRAME_MS)
        while index < len(words) and (words[index].start_ms < played or played_all):
            if publish:
                self._emit(utterance, words[index])
            index += 1
        self._cursors[utterance] = index
        if index < len(words):
            return now + max(MIN_WAIT_S, (words[index].start_ms - played) / 1000.0)
        if total is not None:
            return None  # every word published: a synthesis that ended has no more
        return now + POLL_S
