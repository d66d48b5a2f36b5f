"""An ``asyncio.Event`` whose waiters are kept only while someone waits, in a list.

An empty ``collections.deque`` is a 624-byte block, and every ``asyncio.Event`` makes one at
construction. A WebRTC session holds about sixteen of them (ours, aiortc's, aioice's), most
never waited on (a sender's "RTCP task exited", set once and read at close) or waited once
(connected): 10.4 KB of a silent session's 94 KB of Python heap (bench/session_memory.py).
``LazyEvent`` behaves as ``asyncio.Event`` (it is one) but keeps an empty tuple until the first
``wait`` and drops its waiters' container again when the last one leaves. That container is a
list, not a deque: an event has one waiter or two (a speaking session's producer waits on its
full frame queue for the whole utterance), and a list of one is 64 bytes where a deque is 624.
``make_lazy`` turns an existing ``asyncio.Event`` with no waiters into one (``aiortc_compat``
does that to aiortc's), and ``slim_queue`` keeps an unbounded ``asyncio.Queue`` (aioice's two a
session) without deques: its join Event lazy, no putters' deque, its items and getters in
``Fifo`` lists (≈ 2.7 KB a queue, 64 bytes a list).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Literal

_NONE: tuple[()] = ()  # no waiters: iterable and falsy, as an empty deque is to Event.set


class LazyEvent(asyncio.Event):
    def __init__(self) -> None:
        # not asyncio.Event.__init__: that makes the deque
        self._waiters: Any = _NONE
        self._value = False

    async def wait(self) -> Literal[True]:
        """As ``asyncio.Event.wait`` (Python 3.11-3.13 have this same body)."""
        if self._value:
            return True
        if self._waiters is _NONE:
            self._waiters = []  # set() iterates it, as it does a deque
        fut = self._get_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
            return True
        finally:
            self._waiters.remove(fut)
            if not self._waiters:
                self._waiters = _NONE


def make_lazy(event: asyncio.Event) -> bool:
    """Turn ``event`` (exactly an ``asyncio.Event``, nobody waiting) into a ``LazyEvent`` in
    place, keeping its state; False (left alone) otherwise."""
    if type(event) is not asyncio.Event or event._waiters:  # type: ignore[attr-defined]
        return False
    event.__class__ = LazyEvent
    event._waiters = _NONE  # type: ignore[attr-defined]
    return True


class Fifo(list):  # type: ignore[type-arg]
    """A list with ``popleft``: what ``asyncio.Queue`` asks of its items' and its getters'
    deques (append, popleft, remove, len, iteration), in 64 bytes instead of 624. A queue
    that holds a few items at a time pops from the front of a short list at deque speed."""

    __slots__ = ()

    def popleft(self) -> Any:
        return self.pop(0)


def slim_queue(q: asyncio.Queue[Any]) -> bool:
    """An unbounded ``asyncio.Queue`` (exactly one) without deques: its ``join`` Event made
    lazy; its putters' deque, which only a full queue's ``put`` appends to (never, unbounded),
    an empty tuple (``get_nowait`` only loops over it); its items and its waiting getters
    moved, in order, to ``Fifo`` lists. False (left alone) for a bounded queue, a subclass, or
    one with a waiting putter."""
    if type(q) is not asyncio.Queue or q.maxsize > 0 or q._putters:  # type: ignore[attr-defined]
        return False
    make_lazy(q._finished)  # type: ignore[attr-defined]
    q._putters = _NONE  # type: ignore[attr-defined]
    if type(q._queue) is not Fifo:  # type: ignore[attr-defined]
        q._queue = Fifo(q._queue)  # type: ignore[attr-defined]
        q._getters = Fifo(q._getters)  # type: ignore[attr-defined]
    return True


def asyncio_problems() -> list[str]:
    """The asyncio internals this module relies on, missing from this Python (tests fail on
    it: tests/test_session_slimming.py)."""
    problems = []
    event = asyncio.Event()
    if not isinstance(getattr(event, "_waiters", None), collections.deque):
        problems.append("asyncio.Event._waiters")
    if getattr(event, "_value", None) is not False:
        problems.append("asyncio.Event._value")
    q: asyncio.Queue[Any] = asyncio.Queue()
    for name in ("_putters", "_getters", "_queue"):
        if not isinstance(getattr(q, name, None), collections.deque):
            problems.append(f"asyncio.Queue.{name}")
    if not isinstance(getattr(q, "_finished", None), asyncio.Event):
        problems.append("asyncio.Queue._finished")
    return problems
