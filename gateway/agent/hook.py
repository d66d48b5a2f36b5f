"""A Python hook as the reply step, for embedders: ``module:function`` (``module.sub:obj.attr``).

The function is called as ``function(text, history)`` (``history`` a list of ``Message``) and
returns an async iterator of text pieces -- an async generator function, typically::

    async def reply(text, history):
        yield "Let me think. "
        yield await my_llm(text)

A coroutine function returning one string is accepted too. Errors the hook raises become
``AgentError``; closing the reply closes the hook's generator.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from gateway.agent.base import AgentError, Message


def load_hook(target: str) -> Callable[..., Any]:
    module_name, colon, attr_path = target.partition(":")
    if not colon or not module_name or not attr_path:
        raise ValueError(f"a hook is module:function, not {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"hook module {module_name!r} cannot be imported: {exc}") from exc
    for attr in attr_path.split("."):
        try:
            obj = getattr(obj, attr)
        except AttributeError as exc:
            raise ValueError(f"hook {target!r}: {module_name} has no {attr_path}") from exc
    if not callable(obj):
        raise ValueError(f"hook {target!r} is not callable")
    return obj


class HookAgent:
    def __init__(self, target: str | Callable[..., Any], *, name: str = "python") -> None:
        self.function = load_hook(target) if isinstance(target, str) else target
        self.target = target if isinstance(target, str) else repr(target)
        self.name = name

    async def reply(self, text: str, history: Sequence[Message]) -> AsyncIterator[str]:
        try:
            result = self.function(text, list(history))
        except Exception as exc:
            raise AgentError(f"hook {self.target} failed: {exc!r}") from exc
        if inspect.isawaitable(result):
            try:
                value = await result
            except Exception as exc:
                raise AgentError(f"hook {self.target} failed: {exc!r}") from exc
            if not isinstance(value, str):
                raise AgentError(f"hook {self.target} returned {type(value).__name__},"
                                 " not str")
            if value:
                yield value
            return
        if not hasattr(result, "__aiter__"):
            raise AgentError(f"hook {self.target} returned {type(result).__name__},"
                             " not an async iterator of str")
        iterator = result.__aiter__()
        try:
            while True:
                try:
                    piece = await iterator.__anext__()
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    raise AgentError(f"hook {self.target} failed: {exc!r}") from exc
                if not isinstance(piece, str):
                    raise AgentError(f"hook {self.target} yielded {type(piece).__name__},"
                                     " not str")
                if piece:
                    yield piece
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    async def close(self) -> None:
        return None
