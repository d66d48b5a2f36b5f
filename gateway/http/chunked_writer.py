"""A prepared chunked aiohttp response's body, writable without awaiting once it has started.

``StreamResponse.write`` is a coroutine (it may wait for the reader). A live HTTP stream's due
frames are written from the shared ticker's callbacks (session/http_leg.py), where nothing may
be awaited, so ``write_now`` writes a chunk (RFC 9112 §7.1: size in hex, CRLF, data, CRLF)
straight to the connection's transport -- and refuses (returns False, nothing written) unless
that is exactly what aiohttp would have sent:

- the response is chunked and not compressed (a compressed body goes through aiohttp's
  compressor);
- it has started: the headers went out with a first ``write`` through aiohttp (aiohttp holds
  the headers back to send them with the first body bytes);
- the connection is open and its writing is not paused (asyncio pauses it above the
  transport's high-water mark: a reader that stopped reading), so the transport's buffer stays
  bounded; a refused chunk is written with ``write``, which waits for the reader.

Only public aiohttp and asyncio interfaces are used (``request.transport``,
``request.protocol.writing_paused``, ``response.chunked``, ``response.compression``);
tests/test_http_speech.py parses live streams written this way with aiohttp's own client.
Bytes written here are not in aiohttp's access-log body length.
"""

from __future__ import annotations

from aiohttp import web


class ChunkedBodyWriter:
    __slots__ = ("_protocol", "_response", "_started", "_transport")

    def __init__(self, request: web.Request, response: web.StreamResponse) -> None:
        self._response = response
        self._transport = request.transport
        self._protocol = request.protocol
        self._started = False

    async def write(self, data: bytes) -> None:
        """Write through aiohttp (waits while the reader does not read)."""
        await self._response.write(data)
        if data:
            self._started = True

    def write_now(self, data: bytes) -> bool:
        """Write ``data`` as one chunk now, or return False (nothing written)."""
        response, transport = self._response, self._transport
        if not (self._started and data and response.chunked and not response.compression):
            return False
        if transport is None or transport.is_closing() or self._protocol.writing_paused:
            return False
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return True
