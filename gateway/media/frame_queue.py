"""The bounded hand-off between the encoder (producer) and the paced track (consumer).

Its bound is the backpressure: synthesis runs ahead of playout by at most ``maxsize`` frames
(50 = 1 s), so memory stays flat for any text length. A producer that found the queue full
sleeps until it has drained to ``low_water`` (half of it by default), not until the next pop:
waking the producer task for every 20 ms frame costs a task switch per packet per speaking
stream, which at hundreds of streams was a tenth of the gateway's CPU (bench/load.py profile).
``clear`` empties it at once (barge-in). ``hold`` pauses it (a barge-in not yet confirmed):
the queue then looks empty to its consumer -- ``len`` 0, ``pop*`` None, ``wait_ready`` waits --
so a paced stream sends its silence, and the producer, once the queue is full, waits as usual;
``release`` plays on from the same frame.

Frames are kept as their payloads in one list and their owners run-length encoded (a run:
owner, first index, count -- one per utterance and sink, as frames arrive in order), not as
``EncodedFrame`` objects: a frame waits here up to a second, long enough to be promoted to the
collector's old generation, and hundreds of streams' worth of such objects made CPython's full
collections pause every stream (bench/load.py, ``gc`` in /healthz). Bytes are not tracked by the
collector; a run is one small list per utterance. ``pop_run`` takes a run's frames at once (a
live HTTP write), with no per-frame bookkeeping. Lists, not deques: an empty deque is a
624-byte block, and every session has a queue, empty while it is silent; a list of a queue's
few dozen frames pops from its front in a memmove of a few hundred bytes (bench.session_memory:
1.4 KB a silent session).

A producer with no task of its own (a phrase-cache replay: ``FanoutFeed`` in media/fanout.py)
does not wait in ``extend``: it ``offer``s what fits and asks ``when_space`` to be called back
once the queue has drained to ``low_water`` (or been cleared), at the moment a waiting
``extend`` would have been woken. A coroutine chain waiting in ``extend`` (the task, its
context, five frames) was ≈ 2 KB of a speaking session's heap; the callback is one slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from gateway.media.frames import EncodedFrame, FrameOwner
from gateway.runtime.lazy_event import LazyEvent


class FrameQueue:
    __slots__ = ("_held", "_on_space", "_payloads", "_reader", "_runs", "_space", "ahead",
                 "high_water", "low_water", "maxsize", "on_take_back", "on_wake",
                 "producer_waits")

    def __init__(self, maxsize: int = 50, low_water: int | None = None) -> None:
        if maxsize <= 0:
            raise ValueError("maxsize must be positive")
        low = maxsize // 2 if low_water is None else low_water
        if not 0 <= low < maxsize:
            raise ValueError("low_water must be in 0..maxsize-1")
        self.maxsize = maxsize
        self.low_water = low
        self._payloads: list[bytes] = []
        # [owner, index of the run's next frame, frames left in the run], oldest first
        self._runs: list[list[Any]] = []
        self._space = LazyEvent()
        self._space.set()
        #: ``when_space``'s callback: a producer without a task waiting for room
        self._on_space: Callable[[], None] | None = None
        self._reader: asyncio.Future[None] | None = None  # a consumer waiting in wait_ready
        self._held = False
        #: frames a consumer took ahead of their slot and has not sent yet (the compiled
        #: path's fed frames: webrtc/fed_frames.py): still counted against ``maxsize``, so
        #: synthesis stays at most ``maxsize`` frames ahead of what went out
        self.ahead = 0
        self.high_water = 0
        self.producer_waits = 0  # times a producer slept on a full queue
        #: called when a frame arrives in an empty queue (a paced consumer that may send early)
        self.on_wake: Callable[[], None] | None = None
        #: called before ``hold`` and ``clear``: a consumer that took frames ahead of their
        #: slots and has not sent them puts them back (``push_front``), so they are held or
        #: dropped with the rest (the compiled path's fed frames, webrtc/fed_frames.py)
        self.on_take_back: Callable[[], None] | None = None

    def __len__(self) -> int:
        """Frames the consumer may take now (0 while held)."""
        return 0 if self._held else len(self._payloads)

    @property
    def queued(self) -> int:
        """Frames in the queue, held or not."""
        return len(self._payloads)

    @property
    def held(self) -> bool:
        return self._held

    def hold(self) -> None:
        """Pause the consumer: nothing is popped until ``release``."""
        if self.on_take_back is not None:
            self.on_take_back()
        self._held = True

    def release(self) -> None:
        """Play on: a consumer waiting is woken as if its frames had just arrived."""
        if not self._held:
            return
        self._held = False
        if self._payloads:
            self._wake_reader()
            if self.on_wake is not None:
                self.on_wake()

    def _wake_reader(self) -> None:
        reader = self._reader
        if reader is not None:
            self._reader = None
            if not reader.done():
                reader.set_result(None)

    async def put(self, frame: EncodedFrame) -> None:
        """Append, waiting while the queue is full (until it drains to ``low_water``)."""
        await self.extend((frame.payload,), frame.owner, frame.index)

    async def extend(
        self,
        payloads: Sequence[bytes],
        owner: FrameOwner | None,
        first_index: int = 0,
        start: int = 0,
    ) -> None:
        """Append consecutive frames of one owner, ``payloads[start:]`` (indexes from
        ``first_index``), as many at a time as there is room for: a phrase-cache replay costs a
        few list extends -- no coroutine call and no object per frame, and no copy of the
        phrase (``start`` instead of a slice)."""
        done = start
        while done < len(payloads):
            while len(self._payloads) + self.ahead >= self.maxsize:
                self._space.clear()
                self.producer_waits += 1
                await self._space.wait()
            done += self._append(payloads, owner, first_index - start, done)

    def offer(
        self,
        payloads: Sequence[bytes],
        owner: FrameOwner | None,
        first_index: int = 0,
        start: int = 0,
    ) -> int:
        """Append as many of ``payloads[start:]`` as fit now, never waiting; returns how many."""
        return self._append(payloads, owner, first_index - start, start)

    def when_space(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, from the loop (``call_soon``), when the queue has drained to
        ``low_water`` or been cleared -- when a producer waiting in ``extend`` would wake. For
        a producer with no task that found the queue full (``offer`` took less than it gave):
        one callback at a time (a queue has one producer); ``cancel_space`` forgets it."""
        if self._on_space is not None:
            raise RuntimeError("a producer already waits for room in this queue")
        self._on_space = callback
        self._space.clear()
        self.producer_waits += 1

    def cancel_space(self, callback: Callable[[], None]) -> None:
        """Forget ``callback`` if ``when_space`` holds it (its producer was cut): it is not
        called. Another producer's callback, registered since, is left alone."""
        if self._on_space == callback:  # a bound method: equal, not the same object
            self._on_space = None

    def _drained(self, hand_back: bool = False) -> Callable[[], None] | None:
        """Room again (down to low water, or cleared): wake the producer, task or callback
        (``hand_back``: the callback returned for the caller to run, not scheduled)."""
        self._space.set()
        callback = self._on_space
        if callback is not None:
            self._on_space = None
            if hand_back:
                return callback
            self._wake(callback)
        return None

    def _wake(self, callback: Callable[[], None]) -> None:
        """A producer's ``when_space`` callback run soon: the loop's next iteration."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a unit test popping by hand): at once
            callback()
        else:
            loop.call_soon(callback)

    def _append(
        self, payloads: Sequence[bytes], owner: FrameOwner | None, index_base: int, done: int
    ) -> int:
        """Append from ``payloads[done]`` on; frame ``payloads[k]`` gets index
        ``index_base + k``."""
        room = min(self.maxsize - len(self._payloads) - self.ahead, len(payloads) - done)
        if room <= 0:
            return 0
        was_empty = not self._payloads
        self._payloads.extend(payloads[done : done + room])
        runs, first = self._runs, index_base + done
        last = runs[-1] if runs else None
        if last is not None and last[0] is owner and last[1] + last[2] == first:
            last[2] += room  # the same run goes on
        else:
            runs.append([owner, first, room])
        if len(self._payloads) > self.high_water:
            self.high_water = len(self._payloads)
        if self._held:
            return room
        self._wake_reader()
        if was_empty and self.on_wake is not None:
            self.on_wake()
        return room

    async def wait_ready(self) -> None:
        """For a consumer that is not paced (an HTTP writer): return once a frame is queued."""
        while not self._payloads or self._held:
            if self._reader is None or self._reader.done():
                self._reader = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._reader)

    def pop(self) -> EncodedFrame | None:
        """The next frame, or None when empty (the consumer never waits on the producer)."""
        fields = self.pop_fields()
        return None if fields is None else EncodedFrame(*fields)

    def pop_fields(self) -> tuple[bytes, FrameOwner | None, int] | None:
        """``pop`` without building an ``EncodedFrame``: (payload, owner, index) or None."""
        payloads = self._payloads
        if not payloads or self._held:
            return None
        run = self._runs[0]
        owner, index = run[0], run[1]
        if run[2] == 1:
            del self._runs[0]
        else:
            run[1] = index + 1
            run[2] -= 1
        payload = payloads.pop(0)
        if len(payloads) + self.ahead <= self.low_water and not self._space.is_set():
            self._drained()
        return payload, owner, index

    def push_front(self, payload: bytes, owner: FrameOwner | None, index: int) -> None:
        """Put back a frame taken (``pop_fields``, ``pop_run``) and never sent: it is next
        again. Frames put back newest first keep their order. Wakes nobody."""
        self._payloads.insert(0, payload)
        runs = self._runs
        first = runs[0] if runs else None
        if first is not None and first[0] is owner and first[1] == index + 1:
            first[1] = index
            first[2] += 1
        else:
            runs.insert(0, [owner, index, 1])

    def pop_run(self, limit: int, ahead: bool = False
                ) -> tuple[list[bytes], FrameOwner | None, int] | None:
        """Up to ``limit`` frames of one owner at once: (payloads, owner, first index), or None
        when empty. Their indexes are consecutive (one owner's frames arrive in order).
        ``ahead``: taken ahead of their slots, counted in ``ahead`` at once (the caller takes
        back what it does not keep: ``ahead -=``, ``push_front``) -- they make no room, so the
        producer is not woken here but when they are sent (``sent_ahead``)."""
        payloads = self._payloads
        if not payloads or limit <= 0 or self._held:
            return None
        run = self._runs[0]
        owner, first, left = run
        if limit >= left:
            count = left
            del self._runs[0]
        else:
            count = limit
            run[1] = first + count
            run[2] = left - count
        out = payloads[:count]
        del payloads[:count]
        if ahead:
            self.ahead += count
        elif len(payloads) + self.ahead <= self.low_water and not self._space.is_set():
            self._drained()
        return out, owner, first

    def sent_ahead(self, count: int, hand_back: bool = False) -> Callable[[], None] | None:
        """``count`` of the frames taken ahead (``ahead``) went out: room for the producer.

        ``hand_back``: for a consumer that takes more right after (the compiled path's visit,
        ``BatchStream.sent_from_c``): a task producer is woken as ever, but a ``when_space``
        callback now due is returned, for the caller to run before it takes more, not
        scheduled with ``call_soon``. The refill then lands in the same visit, so that visit
        can feed a full run, where the ``call_soon`` was a loop callback of its own and the next
        visit came a few frames later to take what it queued (docs/density.md, "The speaking
        premium")."""
        self.ahead -= count
        if len(self._payloads) + self.ahead <= self.low_water and not self._space.is_set():
            return self._drained(hand_back)
        return None

    def clear(self) -> list[EncodedFrame]:
        """Drop everything queued; return what was dropped."""
        if self.on_take_back is not None:
            self.on_take_back()
        payloads = iter(self._payloads)
        dropped = [
            EncodedFrame(next(payloads), owner, first + k)
            for owner, first, count in self._runs
            for k in range(count)
        ]
        self._payloads.clear()
        self._runs.clear()
        self._drained()
        return dropped
