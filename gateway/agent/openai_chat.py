"""Replies from any OpenAI-compatible chat-completions server (vLLM, llama.cpp's server, Ollama,
OpenAI): ``POST {base}/chat/completions`` with ``"stream": true``.

The request's messages are the system prompt (if any), the conversation's history and the
user's turn. The reply is server-sent events ``data: {"choices":[{"delta":{"content": ...}}]}``
ending with ``data: [DONE]``; each non-empty ``delta.content`` is yielded at once. A server
that ignores ``stream`` and answers one ``chat.completion`` JSON is read too.

Timeouts: ``connect_timeout`` to open the connection, ``first_token_timeout`` from the request
to the first piece of text (a cold model may be slow), ``token_timeout`` between later reads.
Every failure -- unreachable, non-200 (OpenAI's ``{"error": {"message"}}`` is quoted), an
``error`` event in the stream, a stream cut before ``[DONE]`` or a finish reason, a timeout --
raises ``AgentError``. Closing the generator closes the HTTP response, so the server sees the
client go away and stops generating.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.agent.base import AgentError, Message
from gateway.agent.sse import SseParser
from gateway.net.error_body import error_message

log = logging.getLogger(__name__)
_ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class ChatConfig:
    base_url: str  # http://host:port/v1
    model: str
    system: str = "You are a helpful voice assistant. Answer briefly, in plain spoken sentences."
    max_tokens: int | None = None
    temperature: float | None = None
    connect_timeout: float = 3.0
    first_token_timeout: float = 20.0
    token_timeout: float = 10.0
    api_key_env: str | None = None  # name of an environment variable holding a bearer token

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be http(s)://..., not {self.base_url!r}")
        if not self.model:
            raise ValueError("a model name is required")
        for name in ("connect_timeout", "first_token_timeout", "token_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call (``reply_with_tools``): its ``index`` in the reply, its
    ``id`` and ``name`` (on its first piece), and a piece of its JSON ``arguments``."""

    index: int
    id: str | None
    name: str | None
    arguments: str


def _tool_deltas(chunk: Any) -> list[ToolCallDelta]:
    choices = chunk.get("choices") or [] if isinstance(chunk, dict) else []
    if not choices:
        return []
    delta = choices[0].get("delta") or choices[0].get("message") or {}
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    out = []
    for n, call in enumerate(calls if isinstance(calls, list) else []):
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        arguments = function.get("arguments")
        out.append(ToolCallDelta(call.get("index", n) if isinstance(call.get("index"), int)
                                 else n, call.get("id"), function.get("name"),
                                 arguments if isinstance(arguments, str) else ""))
    return out


def _delta_text(chunk: Any) -> tuple[str, str | None]:
    """(content, finish_reason) of a chat.completion.chunk (first choice)."""
    if not isinstance(chunk, dict):
        raise AgentError(f"a stream event is no JSON object: {str(chunk)[:120]}")
    if "error" in chunk or chunk.get("object") == "error":  # OpenAI/llama.cpp; older vLLM
        message = error_message(json.dumps(chunk).encode())
        raise AgentError(f"the server failed mid-stream: {message}")
    choices = chunk.get("choices") or []
    if not choices:
        return "", None  # usage-only chunks and the like
    choice = choices[0]
    delta = choice.get("delta") or choice.get("message") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    return (content if isinstance(content, str) else ""), choice.get("finish_reason")


class OpenAIChatAgent:
    def __init__(self, config: ChatConfig, *, name: str = "openai") -> None:
        self.config = config
        self.name = name
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "text/event-stream"}
            if self.config.api_key_env:
                token = os.environ.get(self.config.api_key_env)
                if not token:
                    raise AgentError(f"environment variable {self.config.api_key_env}"
                                     " (the API key) is not set")
                headers["Authorization"] = f"Bearer {token}"
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout)
            self._session = aiohttp.ClientSession(timeout=timeout, headers=headers)
        return self._session

    def request_body(self, text: str, history: Sequence[Message]) -> dict[str, Any]:
        messages = [Message("system", self.config.system)] if self.config.system else []
        messages += [*history, Message("user", text)]
        body: dict[str, Any] = {"model": self.config.model,
                                "messages": [m.as_dict() for m in messages], "stream": True}
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        return body

    async def reply(self, text: str, history: Sequence[Message]) -> AsyncIterator[str]:
        async for piece in self._reply(self.request_body(text, history)):
            if isinstance(piece, str):
                yield piece

    async def reply_with_tools(self, messages: Sequence[dict[str, Any]],
                               tools: Sequence[dict[str, Any]],
                               tool_choice: Any = None) -> AsyncIterator[str | ToolCallDelta]:
        """Function calling: ``messages`` in the chat format as they are (tool calls and tool
        results included; the configured system prompt first), ``tools`` in the chat format;
        text pieces and ``ToolCallDelta`` pieces as they stream."""
        system = [{"role": "system", "content": self.config.system}] if self.config.system \
            else []
        body = self.request_body("", [])
        body["messages"] = [*system, *messages]
        if tools:
            body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        async for piece in self._reply(body):
            yield piece

    async def _reply(self, request: dict[str, Any]) -> AsyncIterator[str | ToolCallDelta]:
        url = self.config.endpoint
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.first_token_timeout
        resp: aiohttp.ClientResponse | None = None
        done = False
        try:
            try:
                async with asyncio.timeout_at(deadline):
                    resp = await self._http().post(url, json=request)
                    if resp.status != 200:
                        body = await resp.content.read(_ERROR_BODY_LIMIT)
                        raise AgentError(f"{url} answered HTTP {resp.status}: "
                                         f"{error_message(body)}")
                if "text/event-stream" not in resp.headers.get("Content-Type", ""):
                    async with asyncio.timeout_at(deadline):
                        whole = await resp.read()
                    done = True
                    content = _whole_reply(whole, url)
                    if content:
                        yield content
                    return
                async for piece in self._stream(resp, deadline):
                    yield piece
                done = True
            except aiohttp.ClientError as exc:  # connect timeouts included
                raise AgentError(f"chat server {url} failed: {exc!r}") from exc
            except TimeoutError as exc:
                which = self._which_timeout(loop, deadline)
                raise AgentError(f"{url} timed out ({which})") from exc
        finally:
            if resp is not None:
                if done:
                    resp.release()
                else:
                    resp.close()  # closes the connection: the server stops generating

    def _which_timeout(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> str:
        if deadline is not None and loop.time() >= deadline:
            return f"no text within {self.config.first_token_timeout} s"
        return f"nothing for {self.config.token_timeout} s"

    async def _stream(self, resp: aiohttp.ClientResponse,
                      deadline: float) -> AsyncIterator[str | ToolCallDelta]:
        parser = SseParser()
        loop = asyncio.get_running_loop()
        got_text = False
        finished = False
        while True:
            limit = deadline if not got_text else loop.time() + self.config.token_timeout
            async with asyncio.timeout_at(limit):
                line = await resp.content.readline()
            event = parser.feed_line(line) if line else parser.finish()
            if event is not None:
                if event.data.strip() == "[DONE]":
                    return
                try:
                    chunk = json.loads(event.data)
                except ValueError as exc:
                    raise AgentError(f"a stream event is no JSON: {event.data[:120]!r}") from exc
                content, reason = _delta_text(chunk)
                if content:
                    got_text = True
                    yield content
                for call in _tool_deltas(chunk):
                    got_text = True
                    yield call
                if reason is not None:
                    finished = True
                    if reason not in ("stop", "length", "tool_calls"):
                        log.info("chat reply ended: finish_reason=%s", reason)
            if not line:
                if finished:
                    return  # a server that sends a finish reason but no [DONE]
                raise AgentError(f"{self.config.endpoint} cut the stream before [DONE]")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _whole_reply(body: bytes, url: str) -> str:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise AgentError(f"{url} sent neither events nor JSON: {body[:120]!r}") from exc
    content, _ = _delta_text(data)
    return content
