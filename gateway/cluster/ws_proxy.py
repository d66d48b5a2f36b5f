"""The public port's WebSocket upgrade, carried to a worker (the ElevenLabs-compatible sockets).

Browsers and the ElevenLabs clients do not follow a redirect on a WebSocket, so the supervisor
proxies it: it opens the same path on the worker (headers forwarded as for HTTP, the proxy token
added), and only once the worker has accepted does it accept the client's upgrade; then every
message is relayed both ways until either side closes, whose close code the other side gets.
A worker that refuses the upgrade (a 4xx: unknown voice, bad query, no token) -> the same
status, in the gateway's JSON error shape. Messages are bounded both ways: the client's by
``max_message_bytes`` (the worker's own limit, so an oversized one fails at the same size),
the worker's by ``MAX_REPLY_BYTES`` (its audio messages).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import web

from gateway.cluster.proxy import request_headers

MAX_REPLY_BYTES = 8 * 1024 * 1024
_WS_HEADERS = ("sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
               "sec-websocket-protocol")


def is_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


async def _pump(src: aiohttp.ClientWebSocketResponse | web.WebSocketResponse,
                dst: aiohttp.ClientWebSocketResponse | web.WebSocketResponse) -> None:
    async for msg in src:
        if msg.type == aiohttp.WSMsgType.TEXT:
            await dst.send_str(msg.data)
        elif msg.type == aiohttp.WSMsgType.BINARY:
            await dst.send_bytes(msg.data)
        else:
            break


async def proxy_websocket(request: web.Request, http: aiohttp.ClientSession, base: str,
                          token: str, max_message_bytes: int = 64 * 1024
                          ) -> web.StreamResponse:
    headers = request_headers(request, token)
    for name in _WS_HEADERS:
        headers.popall(name, None)
    try:
        upstream = await http.ws_connect(base + request.path_qs, headers=headers,
                                         max_msg_size=MAX_REPLY_BYTES, autoping=True)
    except aiohttp.WSServerHandshakeError as exc:
        return web.json_response(
            {"error": {"code": "upgrade_refused",
                       "message": f"the worker refused the WebSocket: {exc.status} {exc.message}"}},
            status=exc.status if 400 <= exc.status < 500 else 502)
    client = web.WebSocketResponse(max_msg_size=max_message_bytes, autoping=True)
    try:
        await client.prepare(request)
        down = asyncio.create_task(_pump(upstream, client))
        up = asyncio.create_task(_pump(client, upstream))
        try:
            await asyncio.wait({down, up}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (down, up):
                task.cancel()
            for task in (down, up):
                with contextlib.suppress(asyncio.CancelledError, ConnectionError,
                                         aiohttp.ClientError):
                    await task
        code = upstream.close_code or client.close_code or aiohttp.WSCloseCode.OK
        await client.close(code=code)
    finally:
        await upstream.close()
    return client
