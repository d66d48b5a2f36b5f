"""The agent interface: the reply step between what the user said and what the gateway speaks.

``reply(text, history)`` returns an async iterator of text pieces (tokens, words or clauses, as
the backend produces them), streamed as soon as they exist. Closing it (``aclose``, which
cancelling the task that iterates it does too) must close whatever it holds upstream (HTTP
requests, hook generators). Failures raise ``AgentError``.

``History`` is one conversation's bounded memory: the caller owns it, passes it to ``reply``
and records each exchange (the reply as far as it was spoken, if the user barged in).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, overload, runtime_checkable

Role = Literal["system", "user", "assistant"]


class AgentError(Exception):
    """The reply step failed (server unreachable or refusing, timeout, broken stream, bad hook)."""


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class History(Sequence[Message]):
    """The latest exchanges of one conversation: at most ``max_messages`` messages and about
    ``max_chars`` characters (the oldest go first, a user message with its reply). A sequence
    of ``Message``: pass it to ``reply`` as it is."""

    def __init__(self, max_messages: int = 20, max_chars: int = 8000) -> None:
        if max_messages < 2 or max_chars < 1:
            raise ValueError("a history holds at least one exchange")
        self.max_messages = max_messages
        self.max_chars = max_chars
        self._messages: deque[Message] = deque()

    def record(self, user: str, assistant: str) -> None:
        """One exchange: what the user said and what was answered (maybe cut short)."""
        self._messages.append(Message("user", user))
        if assistant:
            self._messages.append(Message("assistant", assistant))
        while len(self._messages) > 1 and (
                len(self._messages) > self.max_messages
                or sum(len(m.content) for m in self._messages) > self.max_chars):
            self._messages.popleft()
            while self._messages and self._messages[0].role != "user":
                self._messages.popleft()

    def clear(self) -> None:
        self._messages.clear()

    @property
    def messages(self) -> list[Message]:
        return list(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._messages))

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        return list(self._messages)[index]


@runtime_checkable
class Agent(Protocol):
    name: str

    def reply(self, text: str, history: Sequence[Message]) -> AsyncIterator[str]:
        """Stream the answer to ``text`` (the user's turn) given the earlier ``history``."""
        ...

    async def close(self) -> None:
        """Release connection pools and the like."""
        ...
