"""Timeouts on every HTTP socket, and a cap on connections per client address.

aiohttp closes a connection idle between requests after ``keepalive_timeout`` (its default is
an hour; ours is 15 s, passed to the runner) -- that timer also covers a connection that never
sends a byte. It has no timeout on *reading* a request: a client that sends its headers a byte
at a time (slowloris), or stops half-way through a body, holds its socket (and a file
descriptor) for as long as it likes: 1,100 such sockets under ``ulimit -n 1024`` starved
``/healthz`` and every new session. So each connection's protocol is wrapped
(``GuardedProtocol``) and watched from the bytes it receives:

- headers: from a request's first byte, its headers must be complete within
  ``header_timeout_s``, else the connection gets a 408 JSON error and is closed;
- body: while a request's body is incomplete, ``body_idle_timeout_s`` without a byte (time
  without bytes, not the body's total: a streamed text body stays open as long as it sends)
  fails the body with a 408 the handler's read raises (JSON, from the errors middleware) and
  the connection closes after the response. Not while *we* stopped reading (flow control);
- upgraded connections (WebSockets) are left alone: they live by ping/pong.

Both refusals the guard writes itself (the 408 on late headers, the 503 below) close gently:
the error is written, our side half-closed, and what the client still sends is read and
dropped until it closes or ``LINGER_S`` passes. Closing at once would answer the client's next
byte with a TCP reset that can destroy the error before the client reads it (RFC 9112 §9.6):
a slowloris test saw ``ECONNRESET`` instead of its 408 about one run in four.

The per-address cap refuses a connection past ``max_per_ip`` open ones from the same peer
address with a 503 JSON error at once (a trusted proxy's address is not capped: its clients
are told apart by ``X-Forwarded-For``, see ``client_address.py``).

This needs three attributes of aiohttp's ``RequestHandler`` (``_request_count``, ``_messages``,
``_upgraded``) and the runner's ``_server``; ``check_aiohttp_internals`` names any that an
upgrade moved, and a test calls it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gateway.api.client_address import TrustedProxies
from gateway.config import GatewayConfig

log = logging.getLogger(__name__)
_HANDLER_ATTRS = ("_request_count", "_messages", "_upgraded")
#: how long a refused connection is drained before it is closed (Apache's lingering close is 2 s)
LINGER_S = 2.0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0  # a request's headers, from its first byte (0: off)
    body_idle_timeout_s: float = 30.0  # a body with no byte this long (0: off)
    keepalive_timeout_s: float = 15.0  # idle between requests, or before the first
    #: open connections per peer address (0: no cap). The benches open ≤ 1,000 from 127.0.0.1.
    max_per_ip: int = 1024
    trusted_proxies: tuple[str, ...] = ()  # addresses/networks not capped (X-Forwarded-For)
    #: after the drain, how long a request still in flight (an HTTP speech stream, a proxied
    #: socket) may run before its handler is cancelled: the drain's own allowance
    #: (``--drain-timeout``), not aiohttp's 60 s, which outlived a supervisor's kill of its
    #: workers (drain + 15 s) and a test's patience (40 s: tests/test_cluster.py)
    shutdown_timeout_s: float = 30.0


def connection_limits(config: GatewayConfig) -> ConnectionLimits:
    return ConnectionLimits(
        header_timeout_s=config.header_timeout_s, body_idle_timeout_s=config.body_idle_timeout_s,
        keepalive_timeout_s=config.keepalive_timeout_s, max_per_ip=config.max_connections_per_ip,
        trusted_proxies=config.trusted_proxies, shutdown_timeout_s=config.drain_timeout_s,
    )


def serve_options(limits: ConnectionLimits) -> dict[str, Any]:
    """The ``AppRunner`` keyword arguments these limits need (aiohttp's own keep-alive, and
    how long its shutdown waits for requests in flight)."""
    return {"keepalive_timeout": limits.keepalive_timeout_s,
            "shutdown_timeout": limits.shutdown_timeout_s}


def check_aiohttp_internals() -> list[str]:
    """What this module relies on that the installed aiohttp no longer has."""
    code = (RequestHandler.__init__.__code__.co_names
            + RequestHandler.data_received.__code__.co_names)
    problems = [f"RequestHandler.{name}" for name in _HANDLER_ATTRS if name not in code]
    if "_server" not in web.AppRunner.__slots__ + web.BaseRunner.__slots__:
        problems.append("BaseRunner._server")
    server_init = web.Server.__init__.__code__.co_names
    problems += [f"Server.{name}" for name in ("_loop", "_kwargs") if name not in server_init]
    if "handle_error" not in vars(RequestHandler):
        problems.append("RequestHandler.handle_error")
    return problems


def _raw_error(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


_PARSE_ERRORS = {
    "LineTooLong": "the request line or a header is too long (at most 8,190 bytes)",
    "BadHttpMethod": "not an HTTP request (bad method)",
    "BadStatusLine": "not an HTTP request (bad request line)",
    "InvalidHeader": "a malformed header",
    "InvalidURLError": "a malformed URL",
    "ContentEncodingError": "the body's Content-Encoding is not supported or the body is not "
                            "valid in it (gzip and deflate are)",
    "TransferEncodingError": "a malformed chunked body",
    "ContentLengthError": "the body does not match its Content-Length",
}


class JsonErrorHandler(RequestHandler):
    """aiohttp's handler, but the errors it answers itself -- requests its parser refused,
    before any route or middleware runs -- are JSON like every other error, name the problem
    without echoing the request (a refused request line would carry its ``access_token``), and
    log one line, not a traceback."""

    __slots__ = ()

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's 'Unhandled exception' (e.g. draining a body a handler refused as
        unreadable): one line; the traceback at debug level only."""
        exc = kw.get("exc_info")
        what = f": {type(exc).__name__}: {exc}" if isinstance(exc, BaseException) else ""
        self.logger.warning((args[0] if args else "error") + what, *args[1:])
        self.logger.debug("the traceback", **kw)

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        kind = type(exc).__name__ if exc is not None else ""
        log.info("refused a request from %s: %d %s", request.remote, status, kind or "error")
        if request.writer.output_size > 0:
            raise ConnectionError("a response was under way: cannot send an error response")
        if status >= 500:
            code, text = "internal_error", "the gateway hit an unexpected error"
        elif status == 408 or status == 504:
            code, text = "request_timeout", "the request took too long"
        else:
            code = "bad_request" if status == 400 else f"http_{status}"
            text = _PARSE_ERRORS.get(kind, "a malformed HTTP request")
        response = web.json_response({"error": {"code": code, "message": text}}, status=status)
        response.force_close()
        return response


class BodyIdleTimeout(web.HTTPRequestTimeout, TimeoutError):
    """What a handler's body read raises after the body went quiet: a 408 for the errors
    middleware; a ``TimeoutError`` too, so aiohttp's after-response drain of the unread body
    ends quietly on it (as on its own lingering timeout) instead of logging a traceback."""


class ConnectionGuard:
    """The runner's protocol factory, wrapped: counts connections per address and wraps each
    protocol in a ``GuardedProtocol``. Everything else is the wrapped server's."""

    def __init__(self, server: Any, limits: ConnectionLimits) -> None:
        self._server = server
        self.limits = limits
        self.open: Counter[str] = Counter()
        self.refused = 0
        self.timed_out = 0
        self._trusted = TrustedProxies(limits.trusted_proxies)

    def __call__(self) -> GuardedProtocol:
        server = self._server  # what aiohttp's Server.__call__ does, with our handler class
        return GuardedProtocol(JsonErrorHandler(server, loop=server._loop, **server._kwargs), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    def admit(self, address: str) -> bool:
        cap = self.limits.max_per_ip
        if cap > 0 and self.open[address] >= cap and address not in self._trusted:
            self.refused += 1
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]


def guard_runner(runner: web.BaseRunner, limits: ConnectionLimits) -> ConnectionGuard:
    """Wrap ``runner``'s protocol factory (after ``setup()``, before any site starts)."""
    server = getattr(runner, "_server", None)
    if server is None:
        raise RuntimeError("guard_runner: call after runner.setup() (aiohttp internals moved?)")
    guard = ConnectionGuard(server, limits)
    runner._server = guard  # type: ignore[attr-defined]
    return guard


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's ``RequestHandler`` with header and body-inactivity timeouts (module doc)."""

    def __init__(self, inner: RequestHandler, guard: ConnectionGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.transport: asyncio.Transport | None = None
        self._address: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._payload: Any = None  # the body being received, while it is incomplete
        self._lingering = False  # refused: draining what the client sends until it closes

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio.Transport
        self.transport = transport
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) else "?"
        if not self.guard.admit(address):
            self._refuse(_raw_error(
                503, "Service Unavailable", "too_many_connections",
                f"more than {self.guard.limits.max_per_ip} open connections from this address "
                "(--max-connections-per-ip)"))
            return
        self._address = address
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if self._address is None or self._lingering:  # refused: read and dropped
            return
        if inner._upgraded:  # a WebSocket: its own keep-alive
            inner.data_received(data)
            self._cancel()
            return
        before = inner._request_count
        inner.data_received(data)
        if inner._upgraded:
            self._cancel()
            return
        if inner._request_count != before:  # headers complete: now the body, if any
            self._cancel()
            payload = inner._messages[-1][1] if inner._messages else None
            if payload is not None and not payload.is_eof():
                self._payload = payload
                self._arm(self.guard.limits.body_idle_timeout_s, self._body_idle)
            else:
                self._payload = None
        elif self._payload is not None:  # more of the body
            if self._payload.is_eof():
                self._payload = None
                self._cancel()
            else:
                self._arm(self.guard.limits.body_idle_timeout_s, self._body_idle)
        elif self._timer is None and data:  # the first bytes of a request's headers
            self._arm(self.guard.limits.header_timeout_s, self._header_late)

    def eof_received(self) -> bool | None:
        if self._address is None or self._lingering:
            if self.transport is not None:
                self.transport.close()
            return None
        return self.inner.eof_received()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel()
        if self._address is not None:
            self.guard.release(self._address)
            self._address = None
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- the timers ----------------------------------------------------------------------
    def _arm(self, seconds: float, fire: Callable[[], None]) -> None:
        self._cancel()
        if seconds > 0:
            self._timer = asyncio.get_running_loop().call_later(seconds, fire)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_late(self) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing():
            return
        self.guard.timed_out += 1
        log.info("closing a connection from %s: headers not complete in %g s",
                 self._address, self.guard.limits.header_timeout_s)
        self._refuse(_raw_error(
            408, "Request Timeout", "header_timeout",
            f"the request headers did not arrive within {self.guard.limits.header_timeout_s:g} "
            "s (--header-timeout)"))

    def _refuse(self, response: bytes) -> None:
        """Write ``response`` and close gently (module doc): half-close, drop what the client
        still sends, close on its EOF or after ``LINGER_S``. The handler sees no more bytes and
        is told the connection is gone when it is."""
        transport = self.transport
        assert transport is not None
        self._lingering = True
        transport.write(response)
        if not transport.can_write_eof():  # TLS: no half-close
            transport.close()
            return
        transport.write_eof()
        self._arm(LINGER_S, transport.close)

    def _body_idle(self) -> None:
        self._timer = None
        payload, transport = self._payload, self.transport
        if payload is None or payload.is_eof() or transport is None or transport.is_closing():
            return
        if not getattr(transport, "is_reading", lambda: True)():  # we paused it: not the client
            self._arm(self.guard.limits.body_idle_timeout_s, self._body_idle)
            return
        self.guard.timed_out += 1
        seconds = self.guard.limits.body_idle_timeout_s
        log.info("failing a request body from %s: no byte for %g s", self._address, seconds)
        payload.set_exception(BodyIdleTimeout(
            text=f"no byte of the request body for {seconds:g} s (--body-idle-timeout)"))
        self._payload = None
        self.inner.close()  # the connection ends after the handler's response
