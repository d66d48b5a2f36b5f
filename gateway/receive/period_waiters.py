"""Callers waiting for a playout period: ``wait_for(predicate)`` until one is played.

The playout hands every period to ``notify``; a waiter whose predicate holds is released, the
others keep waiting. ``close()`` fails every waiter (and later calls) with
:class:`ReceivePathClosed`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.receive.pcm_source import ReceivePathClosed
from gateway.receive.receive_config import PlayedPeriod

Predicate = Callable[[PlayedPeriod], bool]


class PeriodWaiters:
    def __init__(self) -> None:
        self._waiters: list[tuple[Predicate, asyncio.Future[None]]] = []
        self._closed = False

    @property
    def waiting(self) -> bool:
        """Anyone waits (the playout makes a period's record only then, or for its log)."""
        return bool(self._waiters)

    def notify(self, period: PlayedPeriod) -> None:
        if not self._waiters:
            return
        keep = []
        for predicate, fut in self._waiters:
            if fut.done():
                continue
            if predicate(period):
                fut.set_result(None)
            else:
                keep.append((predicate, fut))
        self._waiters = keep

    async def wait_for(self, predicate: Predicate) -> None:
        if self._closed:
            raise ReceivePathClosed("receive path closed")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, fut))
        await fut

    def close(self) -> None:
        self._closed = True
        waiters, self._waiters = self._waiters, []
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(ReceivePathClosed("receive path closed"))
