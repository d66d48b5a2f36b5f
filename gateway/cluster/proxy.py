"""A streaming HTTP reverse proxy from the public port to a local worker (aiohttp client).

The request body is read whole first (bodies are small: an SDP offer, a JSON request, capped by
``--max-body-bytes``), so a placement can be retried on another worker. The response is
streamed: each chunk is written as soon as the worker wrote it (an HTTP speech stream's frames,
an SSE event), and written back-pressured (a client that stops reading stops the worker through
TCP flow control, as it would talking to the worker directly). A client that goes away cancels
the handler (``handler_cancellation``), which closes the upstream connection, which cancels the
worker's handler in turn.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from gateway.cluster.identity import PROXY_HEADER

HOP_BY_HOP = frozenset(h.lower() for h in (
    "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE", "Trailer",
    "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
))


def request_headers(request: web.Request, token: str) -> CIMultiDict[str]:
    """The client's headers for the worker. Not its ``Content-Encoding``: the body forwarded
    is ``request.read()``'s, which aiohttp has already decoded (gzip, deflate)."""
    headers: CIMultiDict[str] = CIMultiDict(
        (k, v) for k, v in request.headers.items()
        if k.lower() not in HOP_BY_HOP and k.lower() not in (
            PROXY_HEADER.lower(), "content-encoding")
    )
    forwarded = request.headers.get("X-Forwarded-For")
    client = request.remote or ""
    headers["X-Forwarded-For"] = f"{forwarded}, {client}" if forwarded else client
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-Host"] = request.host
    headers[PROXY_HEADER] = token
    return headers


def response_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    keep_length = "chunked" not in upstream.headers.get("Transfer-Encoding", "").lower()
    return CIMultiDict(
        (k, v) for k, v in upstream.headers.items()
        if k.lower() not in HOP_BY_HOP or (keep_length and k.lower() == "content-length")
    )


class Upstream:
    """One client session (a connection pool) to every local worker."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, connect=5.0),
        )

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()

    def _session(self) -> aiohttp.ClientSession:
        assert self.http is not None, "Upstream.start() first"
        return self.http

    async def buffered(self, request: web.Request, base: str, body: bytes) -> web.Response:
        """The whole response (small ones: a session's creation), so its status can be looked
        at before anything is sent to the client."""
        async with self._session().request(
            request.method, base + request.path_qs, data=body or None,
            headers=request_headers(request, self.token), allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            return web.Response(status=upstream.status, reason=upstream.reason, body=payload,
                                headers=response_headers(upstream))

    async def streamed(self, request: web.Request, base: str) -> web.StreamResponse:
        body = await request.read() if request.can_read_body else None
        async with self._session().request(
            request.method, base + request.path_qs, data=body or None,
            headers=request_headers(request, self.token), allow_redirects=False,
        ) as upstream:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                          headers=response_headers(upstream))
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except aiohttp.ClientError:
                # The worker went away mid-response: cut the client's connection too, so a
                # truncated stream never looks complete.
                if request.transport is not None:
                    request.transport.close()
                return response
            await response.write_eof()
            return response

    async def get_json(self, url: str, timeout: float) -> Any:
        async with self._session().get(
            url, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            response.raise_for_status()
            return await response.json()

    async def get_text(self, url: str, timeout: float) -> str:
        async with self._session().get(
            url, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            response.raise_for_status()
            return await response.text()
