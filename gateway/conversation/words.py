"""Word events: each word of an utterance published when its listener has *heard* it begin.

An utterance knows when each of its words plays on its own timeline (``Utterance.words``:
ms from its first sample, the synthesizer's own timings or estimated, gateway.text.timing).
The conversation knows how far the listener has played it (``Conversation.played_ms``, the one
definition of heard: the primary sink's sends less its ``listener_delay_s``). A word is heard
once the played position passes its ``start_ms``; then, and not when its frame is sent, the
event ``word {"utterance", "word", "start_ms", "end_ms"}`` goes out on the session's events.

One timer per conversation, not a task per word or per utterance: ``WordEvents`` keeps a
cursor (the next word's index) for each playing utterance and arms a single callback on the
shared ticker (gateway.media.ticker, the grid the sends already wake on; after that tick's
sends, so publishing -- a data-channel message -- never holds a packet back) for the earliest
moment any cursor's next word can be heard, computed from the played position; when it fires
it publishes what was heard and re-arms. Played positions are re-read on every fire, so a
paused playout (sends held) holds the words back too.

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
from collections.abc import Callable

from gateway.media.ticker import shared_ticker
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


class WordEvents:
    """Publishes each followed utterance's words as its listener hears them."""

    def __init__(self, publish: Publish, played: Played,
                 clock: Callable[[], float] = time.monotonic,
                 schedule: Schedule | None = None) -> None:
        self._publish = publish
        self._played = played
        self._clock = clock
        self._schedule = schedule
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
        if index is None:
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

    @property
    def following(self) -> int:
        return len(self._cursors)

    def _emit(self, utterance: Utterance, word: WordTiming) -> None:
        self.published += 1
        self._publish(utterance, word)

    def _arm(self, when: float) -> None:
        if self.closed or when >= self._armed_at:
            return  # the pending callback comes sooner and re-arms for the rest
        self._generation += 1
        self._armed_at = when
        generation = self._generation
        schedule = self._schedule
        if schedule is None:
            try:  # the running loop's; after the tick's sends: an event never delays a packet
                schedule = shared_ticker().call_after_sends
            except RuntimeError:  # no running loop (unit use): nothing is playing
                self._armed_at = math.inf
                return
        schedule(when, lambda: self._fire(generation))

    def _fire(self, generation: int) -> None:
        if generation != self._generation or self.closed:
            return  # superseded by an earlier arm, or closed
        self._armed_at = math.inf
        now = self._clock()
        soonest = math.inf
        for utterance, index in list(self._cursors.items()):
            due = self._advance(utterance, index, now)
            if due is None:
                self._cursors.pop(utterance, None)
            else:
                soonest = min(soonest, due)
        if soonest < math.inf:
            self._arm(soonest)

    def _advance(self, utterance: Utterance, index: int, now: float) -> float | None:
        """Publish what of ``utterance`` was heard by ``now``; when to look again (None: it
        is finished with)."""
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
            self._emit(utterance, words[index])
            index += 1
        self._cursors[utterance] = index
        if index < len(words):
            return now + max(MIN_WAIT_S, (words[index].start_ms - played) / 1000.0)
        if total is not None:
            return None  # every word published: a synthesis that ended has no more
        return now + POLL_S
