"""The echo agent: "You said: ..." streamed word by word (a stand-in for a real reply step)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from gateway.agent.base import Message


class EchoAgent:
    def __init__(self, *, prefix: str = "You said:", delay: float = 0.0,
                 name: str = "echo") -> None:
        self.prefix = prefix
        self.delay = delay  # seconds before each word (to act like a token stream)
        self.name = name

    async def reply(self, text: str, history: Sequence[Message]) -> AsyncIterator[str]:
        words = f"{self.prefix} {' '.join(text.split())}".split()
        for i, word in enumerate(words):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield word if i == 0 else f" {word}"

    async def close(self) -> None:
        return None
