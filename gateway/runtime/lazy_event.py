"""An ``asyncio.Event`` whose waiter deque exists only while someone waits.

An empty ``collections.deque`` is a 624-byte block, and every ``asyncio.Event`` makes one at
construction. A WebRTC session holds about sixteen of them (ours, aiortc's, aioice's), most
never waited on (a sender's "RTCP task exited", set once and read at close) or waited once
(connected): 10.4 KB of a silent session's 94 KB of Python heap (bench/session_memory.py).
``LazyEvent`` behaves as ``asyncio.Event`` (it is one) but keeps an empty tuple until the first
``wait`` and drops the deque again when its last waiter leaves. ``make_lazy`` turns an existing
``asyncio.Event`` with no waiters into one (``aiortc_compat`` does that to aiortc's), and
``slim_queue`` drops an unbounded ``asyncio.Queue``'s two idle deques (aioice's, ≈ 1.2 KB each).
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
            self._waiters = collections.deque()
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


def slim_queue(q: asyncio.Queue[Any]) -> bool:
    """An unbounded ``asyncio.Queue`` (exactly one) without its two idle deques: its ``join``
    Event made lazy, and its putters' deque, which only a full queue's ``put`` appends to
    (never, unbounded), an empty tuple (``get_nowait`` only loops over it). False (left alone)
    for a bounded queue, a subclass, or one with a waiting putter."""
    if type(q) is not asyncio.Queue or q.maxsize > 0 or q._putters:  # type: ignore[attr-defined]
        return False
    make_lazy(q._finished)  # type: ignore[attr-defined]
    q._putters = _NONE  # type: ignore[attr-defined]
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
    for name in ("_putters", "_getters"):
        if not isinstance(getattr(q, name, None), collections.deque):
            problems.append(f"asyncio.Queue.{name}")
    if not isinstance(getattr(q, "_finished", None), asyncio.Event):
        problems.append("asyncio.Queue._finished")
    return problems
