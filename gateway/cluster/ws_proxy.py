"""WebSocket upgrades from the public port to a worker (the Realtime API's and the
ElevenLabs-compatible sockets).

A browser (or an ElevenLabs client) does not follow a redirect on a WebSocket, so the supervisor
connects to the worker itself first -- a worker that refuses the upgrade is reported before the
client's socket is accepted (``Refused``: the Realtime route tries another worker; the
ElevenLabs route answers the same status in the gateway's JSON error shape) -- then accepts the
client's socket with the subprotocol the worker chose and pipes frames both ways. Each direction
awaits its send: a reader that stops reading stops the other side through TCP, as it would
talking to the worker directly. Messages are bounded as the worker bounds them. When either side
closes, so does the other (the worker's close code is passed on).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import WSMsgType, web
from multidict import CIMultiDict

from gateway.cluster.proxy import request_headers
from gateway.realtime.protocol import MAX_MESSAGE_BYTES

#: the ElevenLabs sockets: the client's messages are text (64 KiB), the worker's carry audio
ELEVENLABS_CLIENT_BYTES = 64 * 1024
ELEVENLABS_REPLY_BYTES = 8 * 1024 * 1024


class Refused(Exception):
    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(f"the worker refused the upgrade: HTTP {status} {message}".rstrip())
        self.status = status


def is_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def upgrade_headers(headers: CIMultiDict[str]) -> CIMultiDict[str]:
    """Proxied request headers without the client's own handshake (ws_connect makes one)."""
    return CIMultiDict((k, v) for k, v in headers.items()
                       if not k.lower().startswith("sec-websocket-"))


def offered(request: web.Request) -> tuple[str, ...]:
    raw = request.headers.get("Sec-WebSocket-Protocol", "")
    return tuple(p.strip() for p in raw.split(",") if p.strip())


async def connect(http: aiohttp.ClientSession, url: str, request: web.Request,
                  headers: CIMultiDict[str], max_msg_size: int = MAX_MESSAGE_BYTES
                  ) -> aiohttp.ClientWebSocketResponse:
    try:
        return await http.ws_connect(url, headers=upgrade_headers(headers),
                                     protocols=offered(request), max_msg_size=max_msg_size,
                                     autoping=True)
    except aiohttp.WSServerHandshakeError as exc:
        raise Refused(exc.status, exc.message) from None


async def _pump(source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
                sink: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
    async for message in source:
        if message.type is WSMsgType.TEXT:
            await sink.send_str(message.data)
        elif message.type is WSMsgType.BINARY:
            await sink.send_bytes(message.data)
        else:
            break


async def pipe(request: web.Request, upstream: aiohttp.ClientWebSocketResponse,
               max_msg_size: int = MAX_MESSAGE_BYTES) -> web.WebSocketResponse:
    """Accept the client's socket and join it to ``upstream`` until either ends."""
    protocols = (upstream.protocol,) if upstream.protocol else ()
    client = web.WebSocketResponse(protocols=protocols, max_msg_size=max_msg_size)
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


async def proxy_websocket(request: web.Request, http: aiohttp.ClientSession, base: str,
                          token: str) -> web.StreamResponse:
    """An ElevenLabs-compatible socket to the worker at ``base`` (the proxy token added); a
    refused upgrade is that status (a 4xx: unknown voice, bad query, no token; else 502)."""
    try:
        upstream = await connect(http, base + request.path_qs, request,
                                 request_headers(request, token), ELEVENLABS_REPLY_BYTES)
    except Refused as exc:
        return web.json_response(
            {"error": {"code": "upgrade_refused", "message": str(exc)}},
            status=exc.status if 400 <= exc.status < 500 else 502)
    return await pipe(request, upstream, ELEVENLABS_CLIENT_BYTES)
