"""A reply begun on a tentative transcript (the duplex loop's preemptive reply, for Realtime).

The listener's speculative final arrives while the turn's end is still awaited: with server
VAD and ``create_response``, the agent is asked at once and its first clause rendered
(``Speaker.prerender``), nothing said or sent. If the turn ends on that text, the response
starts from there (its first audio as soon as the turn is over); otherwise it is dropped (the
agent's stream closed, the rendering cancelled): an agent call and a synthesis wasted, never a
word early.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.speech.prerender import Prerender


@dataclass(eq=False)
class PreparedReply:
    turn: int
    text: str
    clauses: AsyncIterator[str]
    task: asyncio.Task[None] | None = None  # reads the first clause, starts its rendering
    first: str | None = None
    prerender: Prerender | None = None

    def take_prerender(self) -> Prerender | None:
        prerender, self.prerender = self.prerender, None
        return prerender

    async def discard(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        aclose = getattr(self.clauses, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        prerender = self.take_prerender()
        if prerender is not None:
            prerender.cancel()
