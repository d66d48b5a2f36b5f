"""The speech frames a stream sent from C has been fed ahead (net/sendpath.py ``gw_feed_run``).

A stream C sends (``BatchStream._to_c``) is fed up to ``FED_SLOTS`` frames from its queue at a
time, one owner's run per C call, laid end to end in one buffer that C reads them from. C sends
one a due slot and writes each packet's fields in the store's ring; it asks for the stream when
its fed frames fall to ``FED_LOW`` or run out, or when a new owner's first frame went. Only then
does Python take what was sent (``sent``: the store's refs, the owners told once a run) and
feed more -- one Python visit per 20 packets of a long utterance, not one a
packet (docs/density.md, "Speech fed ahead"). The frames and their buffers stay here until C
has sent them and they are taken, or are taken back (``take_back``: a queue held or cleared, the
stream back on the tick) and queued again at the front, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.media.frame_queue import FrameQueue
from gateway.media.frames import FrameOwner
from gateway.nack.store import FrameStore
from gateway.net.sendpath import FED_SLOTS

#: ``CompiledBatch.feed_run`` bound to the stream: (payloads, first index, report) -> (taken,
#: the buffer they lie in)
FeedRun = Callable[[list[bytes], int, bool], tuple[int, Any]]

_NO_OWNER = object()  # before the first run: its first frame is reported


class FedFrames:
    """A stream's fed runs, oldest first: [buffer, payloads, owner, first index, frames sent]."""

    __slots__ = ("count", "last_owner", "runs")

    def __init__(self) -> None:
        self.runs: list[list[Any]] = []
        self.count = 0  # frames fed, neither taken as sent nor taken back
        self.last_owner: object = _NO_OWNER  # the owner of the last run fed

    def feed(self, queue: FrameQueue, feed_run: FeedRun) -> bool:
        """Feed C from ``queue`` until it holds ``FED_SLOTS`` or the queue is empty (or held).
        False: C did not take them all (a frame longer than ``sendpath.FEED_MAX``, or the
        stream no longer in C): what it did not take is back at the queue's front, and the
        stream is to go back to the tick."""
        while (room := FED_SLOTS - self.count) > 0:
            # (counted in ``queue.ahead`` as they are popped: still against the queue's
            # bound, so popping them wakes no producer -- sending them does: ``sent``)
            run = queue.pop_run(room, ahead=True)
            if run is None:
                return True
            payloads, owner, first = run
            taken, buf = feed_run(payloads, first, owner is not self.last_owner)
            if taken > 0:
                self.runs.append([buf, payloads, owner, first, 0])
                self.count += taken
                self.last_owner = owner
            if taken < len(payloads):
                queue.ahead -= len(payloads) - max(taken, 0)
                for k in range(len(payloads) - 1, max(taken, 0) - 1, -1):
                    queue.push_front(payloads[k], owner, first + k)
                if taken > 0:
                    del payloads[taken:]
                return False
        return True

    def sent(self, count: int, seq: int, now: float, queue: FrameQueue, store: FrameStore,
             room: bool = True) -> tuple[int, Exception | None]:
        """C sent the oldest ``count`` of them as ``seq`` on (consecutive: no silence goes while
        a frame is fed): their refs recorded in the store (C wrote the ring's fields, RED's
        history is C's), each owner told once for its part (``on_frames_sent`` at ``now``),
        room made in ``queue`` (``FrameQueue.sent_ahead``; ``room`` False: the caller makes
        it, with ``FrameQueue.sent_ahead``'s ``hand_back``). Returns their payload octets and
        the first owner's failure, if any (all are recorded whatever an owner does)."""
        self.count -= count
        if room:
            queue.sent_ahead(count)
        runs = self.runs
        octets = 0
        error: Exception | None = None
        while count > 0 and runs:
            run = runs[0]
            payloads: list[bytes] = run[1]
            owner: FrameOwner | None = run[2]
            done: int = run[4]
            k = min(count, len(payloads) - done)
            part = payloads if done == 0 and k == len(payloads) else payloads[done:done + k]
            timestamp = store.record_run(seq, part, owner)
            octets += sum(map(len, part))
            if owner is not None:
                try:
                    owner.on_frames_sent(run[3] + done, k, seq, timestamp, now)
                except Exception as exc:  # the stream's: the rest is recorded all the same
                    error = error or exc
            if done + k == len(payloads):
                del runs[0]
            else:
                run[4] = done + k
            seq = (seq + k) & 0xFFFF
            count -= k
        return octets, error

    def take_back(self, queue: FrameQueue) -> int:
        """Every frame here, none sent (take the sent ones first: ``sent``), back at the front
        of ``queue`` in order; how many."""
        back = 0
        for run in reversed(self.runs):
            payloads, owner, first, done = run[1], run[2], run[3], run[4]
            for k in range(len(payloads) - 1, done - 1, -1):
                queue.push_front(payloads[k], owner, first + k)
                back += 1
        self.runs.clear()
        self.count = 0
        queue.ahead -= back
        return back
