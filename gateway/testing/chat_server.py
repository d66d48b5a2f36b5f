"""A stand-in OpenAI-compatible chat-completions server on loopback (the wire format of OpenAI,
vLLM, llama.cpp's server and Ollama's /v1), for tests and demos.

    python -m gateway.testing.chat_server --port 8001 --token-delay-ms 40

``POST /v1/chat/completions`` with a JSON body (``model`` and ``messages`` required). With
``"stream": true`` the reply is ``text/event-stream``: a first chunk carrying the role, one
``chat.completion.chunk`` per token (``data: {...}`` + blank line, compact JSON), a last chunk
with ``finish_reason`` and ``data: [DONE]``. Without it, one ``chat.completion`` JSON.
``GET /v1/models`` lists the model. Errors are OpenAI's JSON ``{"error": {...}}``.

Tokens come from ``StandInConfig.tokens`` or ``reply(messages)``; ``first_token_delay_ms`` and
``token_delay_ms`` pace them; ``gate`` (an Event) holds the stream after ``gate_after`` tokens.
``faults``: ``http500``, ``http401``, ``error_event`` (an error event instead of the second half),
``cut_mid_stream`` (the connection closes halfway), ``no_done`` (the body ends after half the
tokens, cleanly, with neither finish reason nor [DONE]), ``hang`` (headers, then nothing),
``ignore_stream`` (one chat.completion JSON even when streaming was asked). ``requests`` records
each request and how it ended (``cancelled`` when the client went away).

Function calling: ``tool_calls(body)`` (for a request with ``tools``) returns the calls to make,
``(name, arguments JSON)`` each; they are streamed as OpenAI streams them (the first chunk of a
call carries its ``id``, ``type`` and ``name``, the arguments follow in pieces, the last chunk's
``finish_reason`` is ``tool_calls``). An empty list: the text tokens as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aiohttp import web

from gateway.testing.stand_in import HttpStandIn

PATH = "/v1/chat/completions"
Fault = Literal["http500", "http401", "error_event", "cut_mid_stream", "no_done", "hang",
                "ignore_stream"]
FAULTS: tuple[str, ...] = get_args(Fault)
DEFAULT_TOKENS = ("Sure", "!", " The", " answer", " is", " forty", "-two", ",", " as", " you",
                  " know", ".", " Anything", " else", "?")


@dataclass
class StandInConfig:
    model: str = "stand-in"
    tokens: tuple[str, ...] | list[str] = DEFAULT_TOKENS
    #: If set, the tokens are ``reply(messages)``.
    reply: Callable[[list[dict[str, Any]]], list[str]] | None = None
    first_token_delay_ms: float = 0.0
    token_delay_ms: float = 0.0
    gate_after: int = 1
    #: If set, a request with ``tools`` is answered with the calls it returns (see the module).
    tool_calls: Callable[[dict[str, Any]], list[tuple[str, str]]] | None = None


@dataclass(eq=False)
class ReceivedChat:
    headers: dict[str, str]
    body: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""
    fault: Fault | None = None
    status: int | None = None
    sent: bytearray = field(default_factory=bytearray)  # every body byte written
    tokens_sent: int = 0
    outcome: str = "pending"  # completed, rejected, fault, cancelled
    finished: asyncio.Event = field(default_factory=asyncio.Event)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _error(status: int, message: str, kind: str = "invalid_request_error",
           param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(status=status, body=_dumps(body).encode(),
                        content_type="application/json")


class ChatStandIn(HttpStandIn):
    FAULTS = FAULTS

    def __init__(self, config: StandInConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.config = config or StandInConfig()
        super().__init__(host, port)
        self.requests: list[ReceivedChat] = []
        #: When set to an Event, every stream pauses after ``gate_after`` tokens until it is set.
        self.gate: asyncio.Event | None = None
        self._ids = itertools.count(1)

    # -- HTTP -------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/v1/models" and request.method == "GET":
            return web.json_response({"object": "list", "data": [
                {"id": self.config.model, "object": "model", "created": 0,
                 "owned_by": "stand-in"}]})
        if request.path != PATH:
            return _error(404, f"Invalid URL ({request.method} {request.path})")
        if request.method != "POST":
            return _error(405, f"Method {request.method} not allowed")
        rec = ReceivedChat(dict(request.headers))
        self.requests.append(rec)
        try:
            resp = await self._chat(request, rec)
            rec.status = resp.status
            if rec.outcome == "pending":
                rec.outcome = "completed" if resp.status == 200 else "rejected"
            return resp
        except (asyncio.CancelledError, ConnectionResetError):
            rec.outcome = "cancelled" if rec.outcome == "pending" else rec.outcome
            raise
        finally:
            rec.finished.set()

    async def _chat(self, request: web.Request, rec: ReceivedChat) -> web.StreamResponse:
        rec.raw = await request.read()
        try:
            body = json.loads(rec.raw)
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return _error(400, "The request body must be a JSON object.")
        rec.body = body
        messages = body.get("messages")
        if not body.get("model"):
            return _error(400, "you must provide a model parameter", param="model")
        if (not isinstance(messages, list) or not messages
                or not all(isinstance(m, dict) and "role" in m for m in messages)):
            return _error(400, "messages must be a non-empty array of role/content objects",
                          param="messages")
        rec.fault = fault = self._next_fault()
        if fault == "http500":
            rec.outcome = "fault"
            return _error(500, "The server had an error while processing your request.",
                          "server_error")
        if fault == "http401":
            rec.outcome = "fault"
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        cfg = self.config
        tokens = list(cfg.reply(messages) if cfg.reply else cfg.tokens)
        ident = f"chatcmpl-standin{next(self._ids)}"
        if not body.get("stream") or fault == "ignore_stream":
            if fault:
                rec.outcome = "fault"
            return web.json_response(self._completion(ident, "".join(tokens), body),
                                     dumps=_dumps)
        return await self._stream(request, rec, ident, tokens, fault)

    def _completion(self, ident: str, text: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"id": ident, "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def _chunk(self, ident: str, model: str, delta: dict[str, Any],
               finish: str | None = None) -> bytes:
        chunk = {"id": ident, "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": model, "system_fingerprint": "fp_standin",
                 "choices": [{"index": 0, "delta": delta, "logprobs": None,
                              "finish_reason": finish}]}
        return f"data: {_dumps(chunk)}\n\n".encode()

    async def _stream(self, request: web.Request, rec: ReceivedChat, ident: str,
                      tokens: list[str], fault: Fault | None) -> web.StreamResponse:
        cfg = self.config
        model = str(rec.body["model"])
        resp = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no"})
        rec.status = 200
        await resp.prepare(request)

        async def send(data: bytes) -> None:
            await resp.write(data)
            rec.sent += data

        await send(self._chunk(ident, model, {"role": "assistant", "content": ""}))
        if fault == "hang":
            rec.outcome = "fault"
            await self._stopping.wait()
            return resp
        if cfg.first_token_delay_ms:
            await asyncio.sleep(cfg.first_token_delay_ms / 1000)
        calls = cfg.tool_calls(rec.body) if cfg.tool_calls and rec.body.get("tools") else []
        if calls:
            for index, (name, arguments) in enumerate(calls):
                await send(self._chunk(ident, model, {"tool_calls": [{
                    "index": index, "id": f"call_standin{next(self._ids)}", "type": "function",
                    "function": {"name": name, "arguments": ""}}]}))
                for at in range(0, len(arguments), 8):
                    await send(self._chunk(ident, model, {"tool_calls": [{
                        "index": index, "function": {"arguments": arguments[at:at + 8]}}]}))
            await send(self._chunk(ident, model, {}, "tool_calls"))
            await send(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        stop_at = len(tokens) // 2 if fault in ("error_event", "cut_mid_stream", "no_done") \
            else len(tokens)
        for i, token in enumerate(tokens[:stop_at]):
            if i and cfg.token_delay_ms:
                await asyncio.sleep(cfg.token_delay_ms / 1000)
            if i == cfg.gate_after and self.gate is not None:
                await self.gate.wait()
            await send(self._chunk(ident, model, {"content": token}))
            rec.tokens_sent += 1
        if fault is not None:
            rec.outcome = "fault"
        if fault == "error_event":
            error = {"error": {"message": "The model crashed mid-stream.", "type": "server_error",
                               "param": None, "code": None}}
            await send(f"data: {_dumps(error)}\n\n".encode())
        elif fault == "cut_mid_stream":
            if request.transport is not None:
                request.transport.close()
            return resp
        elif fault != "no_done":
            await send(self._chunk(ident, model, {}, "stop"))
            await send(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--reply", default=None, help="the reply text (split on spaces into tokens)")
    p.add_argument("--first-token-delay-ms", type=float, default=0.0)
    p.add_argument("--token-delay-ms", type=float, default=0.0)
    p.add_argument("--fault", choices=FAULTS, default=None, help="inject into every request")
    args = p.parse_args(argv)
    tokens: tuple[str, ...] = DEFAULT_TOKENS
    if args.reply:
        words = args.reply.split(" ")
        tokens = tuple(w if i == 0 else f" {w}" for i, w in enumerate(words))
    config = StandInConfig(tokens=tokens, first_token_delay_ms=args.first_token_delay_ms,
                           token_delay_ms=args.token_delay_ms)

    async def serve() -> None:
        standin = ChatStandIn(config, host=args.host, port=args.port)
        standin.faults = args.fault
        async with standin:
            print(f"chat stand-in: {standin.url}", flush=True)
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
