"""A session's close runs once (teardown.CloseOnce, used by Session and RealtimeSession): a
second close waits for the first to end, and ``soon`` starts at most one closing task."""

from __future__ import annotations

import asyncio

from gateway.conversation.teardown import CloseOnce


class Closing:
    def __init__(self) -> None:
        self.guard = CloseOnce()
        self.runs: list[str] = []
        self.release = asyncio.Event()

    async def close(self, reason: str = "closed") -> None:
        if not await self.guard.begin(reason):
            return
        try:
            self.runs.append(reason)
            await self.release.wait()
        finally:
            self.guard.finish()


async def test_a_second_close_waits_for_the_first_and_runs_nothing() -> None:
    c = Closing()
    first = asyncio.create_task(c.close("idle"))
    await asyncio.sleep(0)
    second = asyncio.create_task(c.close("deleted"))
    await asyncio.sleep(0.01)
    assert not second.done()  # waiting for the first close to end
    c.release.set()
    await asyncio.gather(first, second)
    assert c.runs == ["idle"] and c.guard.reason == "idle" and c.guard.closed.is_set()


async def test_soon_starts_one_closing_task() -> None:
    c = Closing()
    c.release.set()
    c.guard.soon(c.close, "failed")
    c.guard.soon(c.close, "again")
    await c.guard.closed.wait()
    c.guard.soon(c.close, "after")
    await asyncio.sleep(0.01)
    assert c.runs == ["failed"]
