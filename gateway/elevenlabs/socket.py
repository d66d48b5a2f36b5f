"""The ElevenLabs-compatible WebSockets: text in as it is written, audio + alignment out.

``/v1/text-to-speech/{voice_id}/stream-input`` (one implicit context) and
``/multi-stream-input`` (``context_id`` on every message, several contexts interleaved on one
socket), with the query ``model_id`` (any), ``output_format`` (``formats.py``), ``auto_mode``,
``sync_alignment``, ``inactivity_timeout`` (seconds the socket stays open with no message;
default 20, at most ``MAX_INACTIVITY_S``) and the rest of theirs accepted; ours:
``first_words`` (0..10, default ``EAGER_FIRST_WORDS``: a context's first clause goes once that
many words are complete; 0: the segmenter's usual first cut). Client messages:

- ``{"text": " ", "voice_settings": ..., "context_id"}``: a context's first message (the
  settings, ``generation_config``, ``xi_api_key`` and unknown fields are accepted and ignored);
- ``{"text": "...", "context_id"}``: more text; ``"flush": true`` speaks what is buffered now;
- ``{"text": ""}``: keep-alive on multi-stream-input; on stream-input, the end of the input;
- ``{"context_id", "close_context": true}``: the context's input is over (``context.py``:
  flushed text is spoken, then ``isFinal``; unflushed text is dropped and its synthesis
  stopped); ``{"close_socket": true}``: every context ends as after ``flush`` +
  ``close_context``, and the socket closes when they are done.

Server messages: ``{"audio": <base64>, "isFinal": null, "alignment", "normalizedAlignment",
"contextId"}`` (alignment per character, times from the message's own audio), then
``{"isFinal": true, "contextId"}`` per context (stream-input: without ``contextId``, and the
socket closes). Bad input -> ``{"error": <code>, "message": ..., "contextId"?}`` and the socket
goes on; a message over ``max_message_bytes``, or no message for the inactivity timeout,
closes it (1009 / 1008, as ElevenLabs does). A socket that closes stops every context's
synthesis at once. Everything is bounded: message size, text per context, contexts per socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from gateway.elevenlabs.context import EAGER_FIRST_WORDS, ContextError, SpeechContext
from gateway.elevenlabs.formats import OutputFormat
from gateway.runtime.message_rate import MessageRate
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)
DEFAULT_INACTIVITY_S = 20.0
MAX_INACTIVITY_S = 300.0  # LiveKit asks for 300
DEFAULT_CONTEXT = "default"


@dataclass
class SocketLimits:
    max_message_bytes: int = 64 * 1024
    max_text_chars: int = 100_000  # per context
    max_contexts: int = 8  # open at once, per socket
    heartbeat_s: float = 30.0
    #: messages a socket may send a second (bursts of twice that): an LLM's tokens come at
    #: 30-100 a second; more is refused with an error message, the socket goes on
    messages_per_s: float = 200.0
    first_words: int = EAGER_FIRST_WORDS  # the query's first_words (our extension) overrides


@dataclass
class SocketStats:
    """Counts for /healthz and tests: the sockets and contexts alive now."""

    sockets: int = 0
    contexts: set[SpeechContext] = field(default_factory=set)
    #: the sockets open now (``close_all`` at the gateway's shutdown)
    open: set[web.WebSocketResponse] = field(default_factory=set)
    opened: int = 0  # sockets ever accepted
    peak_contexts: int = 0  # the most contexts open at once on one socket
    aborted: int = 0  # contexts stopped mid-way because their socket closed


async def close_all(stats: SocketStats) -> None:
    """The gateway is shutting down (after its sessions' drain): every open socket is closed
    with 1001 (going away), as a client's reconnect logic expects, instead of being held open
    until the server's shutdown gives up and cancels its handler."""
    await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"shutting down")
                           for ws in list(stats.open)), return_exceptions=True)


def inactivity(value: str | None) -> float:
    if value is None:
        return DEFAULT_INACTIVITY_S
    seconds = float(value)  # ValueError: the caller answers 400
    if not seconds > 0:
        raise ValueError("inactivity_timeout must be a positive number of seconds")
    return min(seconds, MAX_INACTIVITY_S)


class ContextSocket:
    """One client's socket: its contexts, its messages, its end."""

    def __init__(self, ws: web.WebSocketResponse, voice: Synthesizer, fmt: OutputFormat,
                 limits: SocketLimits, stats: SocketStats, multi: bool) -> None:
        self.ws = ws
        self.voice = voice
        self.format = fmt
        self.limits = limits
        self.stats = stats
        self.multi = multi
        self.contexts: dict[str, SpeechContext] = {}
        self._send_lock = asyncio.Lock()
        self._closing = False
        self._closer: asyncio.Task[bool] | None = None

    async def send(self, body: dict[str, Any]) -> None:
        async with self._send_lock:
            if not self.ws.closed:
                # a client gone mid-send: the receive loop sees the close and aborts the rest
                with contextlib.suppress(ConnectionError):
                    await self.ws.send_str(json.dumps(body, separators=(",", ":")))

    async def error(self, code: str, message: str, context_id: str | None = None) -> None:
        body: dict[str, Any] = {"error": code, "message": message}
        if context_id is not None:
            body["contextId"] = context_id
        await self.send(body)

    def _done(self, context: SpeechContext) -> None:
        self.stats.contexts.discard(context)
        for key, value in list(self.contexts.items()):
            if value is context:
                del self.contexts[key]
        if (not self.multi and context.closed) or (self._closing and not self.contexts):
            # stream-input's one context is over, or close_socket's last one: the socket
            # closes after isFinal (a task of this socket's, awaited or cancelled in abort)
            self._closing = True
            if self._closer is None:
                self._closer = asyncio.get_running_loop().create_task(self.ws.close())

    def _context(self, context_id: str) -> SpeechContext:
        context = self.contexts.get(context_id)
        if context is None:
            if len(self.contexts) >= self.limits.max_contexts:
                raise ContextError(
                    "max_active_conversations",
                    f"at most {self.limits.max_contexts} contexts may be open on one socket; "
                    "close one (close_context) before opening another")
            context = SpeechContext(context_id if self.multi else None, self.voice,
                                    self.format, self.send, self.limits.max_text_chars,
                                    self._done, self.limits.first_words)
            self.contexts[context_id] = context
            self.stats.contexts.add(context)
            self.stats.peak_contexts = max(self.stats.peak_contexts, len(self.contexts))
        return context

    async def handle(self, raw: str) -> None:
        try:
            msg = json.loads(raw)
        except ValueError:
            await self.error("invalid_message", "a message must be a JSON object")
            return
        if not isinstance(msg, dict):
            await self.error("invalid_message", "a message must be a JSON object")
            return
        context_id = msg.get("context_id", msg.get("contextId")) if self.multi else None
        if context_id is not None and (not isinstance(context_id, str) or not context_id
                                       or len(context_id) > 256):
            await self.error("invalid_context_id", "context_id must be a string of 1..256")
            return
        key = context_id or DEFAULT_CONTEXT
        try:
            await self._apply(msg, key, context_id)
        except ContextError as exc:
            await self.error(exc.code, exc.message, context_id)

    async def _apply(self, msg: dict[str, Any], key: str, context_id: str | None) -> None:
        if msg.get("close_socket") is True:
            self._closing = True
            for context in list(self.contexts.values()):
                context.end_input()
            if not self.contexts:
                await self.ws.close()
            return
        text = msg.get("text")
        if text is not None and not isinstance(text, str):
            raise ContextError("invalid_text", "text must be a string")
        if msg.get("close_context") is True:
            if self.multi:
                context = self.contexts.get(key)
                if context is None:
                    raise ContextError("unknown_context", f"no open context {key!r}")
                context.close()
            return
        flush = msg.get("flush") is True
        if text == "" and not flush:
            if not self.multi and key in self.contexts:
                self.contexts[key].end_input()  # stream-input: the end of the input
            return  # multi-stream-input: a keep-alive
        if self._closing:
            raise ContextError("socket_closing", "the socket is closing (close_socket)")
        if not text and key not in self.contexts:
            return  # a flush of a context that never spoke: nothing to do
        context = self._context(key)
        if text:
            context.push(text)
        if flush:
            context.flush()

    async def abort(self) -> None:
        for context in list(self.contexts.values()):
            self.stats.aborted += not context.done
            await context.abort()
        self.contexts.clear()
        if self._closer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._closer, 5)


async def serve_socket(request: web.Request, voice: Synthesizer, fmt: OutputFormat,
                       timeout_s: float, limits: SocketLimits, stats: SocketStats,
                       multi: bool) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=limits.max_message_bytes,
                               heartbeat=limits.heartbeat_s)
    await ws.prepare(request)
    sock = ContextSocket(ws, voice, fmt, limits, stats, multi)
    stats.sockets += 1
    stats.opened += 1
    stats.open.add(ws)
    rate = MessageRate(limits.messages_per_s, 2 * limits.messages_per_s)
    try:
        while not ws.closed:
            try:
                msg = await ws.receive(timeout=timeout_s)
            except TimeoutError:
                with contextlib.suppress(ConnectionError):
                    await sock.error("input_timeout_exceeded",
                                     f"no message for {timeout_s:g} s (inactivity_timeout)")
                await ws.close(code=WSCloseCode.POLICY_VIOLATION,
                               message=b"inactivity timeout")
                break
            if msg.type == WSMsgType.TEXT and not rate.allow():
                await sock.error("rate_limited", f"more than {limits.messages_per_s:g} messages "
                                 "a second: this one was not handled")
            elif msg.type == WSMsgType.TEXT:
                await sock.handle(msg.data)
            elif msg.type == WSMsgType.BINARY:
                await sock.error("invalid_message", "messages are JSON text, not binary")
            elif msg.type == WSMsgType.ERROR:
                log.info("elevenlabs socket error: %r", ws.exception())
                break
            else:  # CLOSE, CLOSING, CLOSED
                break
    except ConnectionError as exc:
        log.info("elevenlabs socket ended by the client: %r", exc)
    finally:
        stats.sockets -= 1
        stats.open.discard(ws)
        await sock.abort()
        if not ws.closed:
            await ws.close()
    return ws
