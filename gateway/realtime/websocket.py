"""The Realtime WebSocket transport: JSON text frames both ways, around one engine.

Reading is awaited event by event (a client that floods is slowed by TCP, not buffered);
writing is one task draining the engine's bounded outbox (``send_str`` waits while the
socket's buffer is full: a slow reader holds back audio, never memory). The connection ends
when the client closes it, when the session is closed (``DELETE``, drain: 1001), or when the
reader fell so far behind that the outbox overflowed (1008).
"""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp import WSCloseCode, WSMsgType, web

from gateway.realtime.engine import RealtimeEngine
from gateway.realtime.outbox import Outbox
from gateway.realtime.protocol import ClientError, error_event, server_event
from gateway.realtime.session import RealtimeSession
from gateway.runtime.message_rate import MessageRate


async def _write(ws: web.WebSocketResponse, engine: RealtimeEngine,
                 outbox: Outbox | None = None) -> None:
    outbox = engine.outbox if outbox is None else outbox
    while (text := await outbox.get()) is not None:
        await ws.send_str(text)


#: client events a socket may send a second (bursts of twice that): audio appends of 10 ms
#: chunks are 100 a second; more is refused with an error event, the socket goes on
MESSAGES_PER_S = 500.0


async def _read(ws: web.WebSocketResponse, engine: RealtimeEngine) -> None:
    rate = MessageRate(MESSAGES_PER_S, 2 * MESSAGES_PER_S)
    async for message in ws:
        if message.type is WSMsgType.TEXT and not rate.allow():
            engine.outbox.put(error_event(ClientError(
                "rate_limited", f"more than {MESSAGES_PER_S:g} client events a second: this "
                "one was not handled")))
        elif message.type is WSMsgType.TEXT:
            await engine.handle_text(message.data)
        elif message.type is WSMsgType.BINARY:
            engine.outbox.put(error_event(ClientError(
                "invalid_event", "binary frames are not events: send JSON text frames")))
        else:
            break


async def serve(ws: web.WebSocketResponse, session: RealtimeSession) -> None:
    """Run the connection until either side ends it; the session is closed after."""
    engine = session.engine
    engine.start()
    writer = asyncio.ensure_future(_write(ws, engine))
    reader = asyncio.ensure_future(_read(ws, engine))
    ended = asyncio.ensure_future(session.closed.wait())
    try:
        await asyncio.wait({writer, reader, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reader.cancel()
        overflowed = engine.outbox.overflowed
        reason = session.close_reason or ("slow reader" if overflowed else "client closed")
        await session.close(reason)
        if not overflowed and not ws.closed:  # the last events (response.done ...) go out
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(writer), 2.0)
        writer.cancel()
        ended.cancel()
        for task in (reader, writer, ended):
            with contextlib.suppress(BaseException):
                await task
        code = WSCloseCode.POLICY_VIOLATION if overflowed else (
            WSCloseCode.GOING_AWAY if reason == "draining" else WSCloseCode.OK)
        with contextlib.suppress(Exception):
            await ws.close(code=code, message=reason.encode()[:120])


async def serve_control(ws: web.WebSocketResponse, engine: RealtimeEngine,
                        closed: asyncio.Event) -> None:
    """A backend's control socket on a call (``?call_id=``): the call's events (GA names, a
    bounded outbox of its own: a slow watcher is cut off, never the call), and its client
    events handled as the call's own. The call goes on when the socket closes."""
    watcher = Outbox()
    watcher.put(server_event("session.created", session=engine.session_json()))
    engine.outbox.watchers.append(watcher)
    writer = asyncio.ensure_future(_write(ws, engine, watcher))
    reader = asyncio.ensure_future(_read(ws, engine))
    ended = asyncio.ensure_future(closed.wait())
    try:
        await asyncio.wait({writer, reader, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if watcher in engine.outbox.watchers:
            engine.outbox.watchers.remove(watcher)
        watcher.close()
        for task in (reader, ended):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(writer), 2.0)
        writer.cancel()
        for task in (reader, writer, ended):
            with contextlib.suppress(BaseException):
                await task
        code = WSCloseCode.POLICY_VIOLATION if watcher.overflowed else WSCloseCode.OK
        with contextlib.suppress(Exception):
            await ws.close(code=code)
