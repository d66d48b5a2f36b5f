"""WebSocket upgrades from the public port to a worker (the Realtime API's sockets).

A browser does not follow a redirect on a WebSocket, so the supervisor connects to the worker
itself first -- a worker that refuses the upgrade (503: full, draining) is reported to the
caller as ``Refused`` before the client's socket is accepted, so another worker can be tried
-- then accepts the client's socket with the subprotocol the worker chose and pipes frames
both ways. Each direction awaits its send: a reader that stops reading stops the other side
through TCP, as it would talking to the worker directly. Frames are bounded as the worker
bounds them (``MAX_MESSAGE_BYTES``). When either side closes, so does the other (the
worker's close code is passed on).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from gateway.realtime.protocol import MAX_MESSAGE_BYTES


class Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"the worker refused the upgrade: HTTP {status}")
        self.status = status


def upgrade_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """Proxied request headers without the client's own handshake (ws_connect makes one)."""
    return CIMultiDict((k, v) for k, v in headers.items()
                       if not k.lower().startswith("sec-websocket-"))


def offered(request: web.Request) -> tuple[str, ...]:
    raw = request.headers.get("Sec-WebSocket-Protocol", "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())


async def connect(http: aiohttp.ClientSession, url: str, request: web.Request,
                  headers: CIMultiDict[str]) -> aiohttp.ClientWebSocketResponse:
    try:
        return await http.ws_connect(url, headers=upgrade_headers(headers),
                                     protocols=offered(request), max_msg_size=MAX_MESSAGE_BYTES,
                                     autoping=True)
    except aiohttp.WSServerHandshakeError as exc:
        raise Refused(exc.status) from None


async def _pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    async for message in source:
        if message.type is WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type is WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        else:
            break


async def pipe(request: web.Request,
               upstream: aiohttp.ClientWebSocketResponse) -> web.WebSocketResponse:
    """Accept the client's socket and join it to ``upstream`` until either ends."""
    protocols = (upstream.protocol,) if upstream.protocol else ()
    client = web.WebSocketResponse(protocols=protocols, max_msg_size=MAX_MESSAGE_BYTES)
    try:
        await client.prepare(request)
        up = asyncio.ensure_future(_pump(client, upstream))
        down = asyncio.ensure_future(_pump(upstream, client))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for task in (up, down):
                with contextlib.suppress(BaseException):
                    await task
    finally:
        code = upstream.close_code
        with contextlib.suppress(Exception):
            await upstream.close()
        with contextlib.suppress(Exception):
            await client.close(code=code or aiohttp.WSCloseCode.OK)
    return client
