"""A cheap HTTP/1.1 streaming reader for the HTTP benches: one asyncio Protocol per response.

It sends one ``POST`` (JSON body, ``Connection: close``), reads the response head, undoes the
chunked transfer coding and counts the audio units in the body as they complete, recording
the arrival time (``time.monotonic()`` when ``data_received`` ran) of each:

- ``frames``: the gateway's framed stream (gateway/http/frame_records.py): after the stream
  header (12 or 14 bytes, by its version byte), each ``0x01`` frame record is one unit;
  ``0x02``/``0x03`` end the stream;
- ``ogg``: Ogg pages (RFC 3533); the first two (OpusHead, OpusTags) and empty pages (the EOS
  page) are not audio, every other page is one unit (the gateway writes one page per frame).

It never decodes Opus and never copies a payload: a unit costs a few byte reads. ``chunks``
counts HTTP chunks, i.e. the server's writes (aiohttp and uvicorn write one chunk per
``write``/``send``). The load generator (bench/http_loadgen.py) runs hundreds of these on one
event loop; the latency phase (bench/http_stream.py) runs one at a time.
"""

from __future__ import annotations

import asyncio
import json
import time
from array import array
from typing import Any

from gateway.http.frame_records import HEADER_BYTES as FRAMES_HEADER_BYTES  # by version

OGG_HEADER_PAGES = 2


def request_bytes(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + data


class AudioStreamReader(asyncio.Protocol):
    """Reads one streamed response; ``done`` resolves when it ends (normally or not)."""

    def __init__(self, request: bytes, kind: str = "frames") -> None:
        if kind not in ("frames", "ogg"):
            raise ValueError(f"unknown stream kind {kind!r}")
        self.request = request
        self.kind = kind
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent_at = 0.0
        self.head_at: float | None = None
        self.first_body_at: float | None = None
        self.status: int | None = None
        self.arrivals = array("d")  # one per audio unit
        self.chunks = 0
        self.body_bytes = 0
        self.ended = False  # the stream's own end (end record / EOS page / last chunk)
        self.error: str | None = None
        self._buf = bytearray()  # raw bytes not yet de-chunked
        self._body = bytearray()  # de-chunked bytes of a unit not yet complete
        self._body_started = False
        self._pages = 0
        self._in_head = True

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.sent_at = time.monotonic()
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buf = self._buf
        buf += data
        pos = 0
        if self._in_head:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self._head(bytes(buf[:end]), now)
            pos = end + 4
            if self.error is not None:
                return
        while True:
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            size = int(buf[pos:nl].split(b";", 1)[0], 16)
            start = nl + 2
            if len(buf) < start + size + 2:
                break
            pos = start + size + 2
            if size == 0:
                self.ended = True
                break
            self.chunks += 1
            self.body_bytes += size
            if self.first_body_at is None:
                self.first_body_at = now
            self._feed(buf[start : start + size], now)
        del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None:
            self.error = repr(exc)
        if not self.done.done():
            self.done.set_result(None)

    # --- internals -----------------------------------------------------------------------------

    def _head(self, head: bytes, now: float) -> None:
        self._in_head = False
        self.head_at = now
        lines = head.decode("latin-1").split("\r\n")
        try:
            self.status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            self.status = 0
        chunked = any(
            line.lower().startswith("transfer-encoding:") and "chunked" in line.lower()
            for line in lines[1:]
        )
        if self.status != 200 or not chunked:
            self.error = f"HTTP {self.status}" + ("" if chunked else " (not chunked)")
            self.close()

    def _feed(self, data: bytearray, now: float) -> None:
        body = self._body
        body += data
        n = len(body)
        p = 0
        if not self._body_started:
            if self.kind == "frames":
                if n < 5 or n < (p := FRAMES_HEADER_BYTES.get(body[4], 0)):
                    return
                if not p:
                    self.error = f"unknown frame stream version {body[4]}"
                    self.close()
                    return
            self._body_started = True
        arrivals = self.arrivals
        if self.kind == "frames":
            while p < n:
                kind = body[p]
                if kind == 1:
                    if n - p < 9:
                        break
                    end = p + 9 + ((body[p + 7] << 8) | body[p + 8])
                    if end > n:
                        break
                    arrivals.append(now)
                    p = end
                elif kind == 2:
                    self.ended = True
                    p += 1
                else:
                    self.error = f"record type 0x{kind:02x} (an error record or garbage)"
                    p = n
        else:
            while n - p >= 27:
                segments = body[p + 26]
                if n - p < 27 + segments:
                    break
                size = sum(body[p + 27 : p + 27 + segments])
                end = p + 27 + segments + size
                if end > n:
                    break
                self._pages += 1
                if body[p + 5] & 0x04:
                    self.ended = True
                if size and self._pages > OGG_HEADER_PAGES:
                    arrivals.append(now)
                p = end
        del body[:p]

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


async def open_stream(
    host: str, port: int, path: str, body: dict[str, Any], kind: str = "frames"
) -> AudioStreamReader:
    """Connect and send the request; the reader starts its clock as the request is written."""
    loop = asyncio.get_running_loop()
    request = request_bytes(host, port, path, body)
    started = time.monotonic()
    _, reader = await loop.create_connection(lambda: AudioStreamReader(request, kind), host, port)
    reader.sent_at = started  # "request" includes the TCP connect (≈0.1 ms on loopback)
    return reader


async def first_audio(
    host: str, port: int, path: str, body: dict[str, Any], kind: str, timeout: float = 60.0
) -> dict[str, Any]:
    """One request read to its end: request -> head, first body byte, first audio unit, end."""
    reader = await open_stream(host, port, path, body, kind)
    try:
        await asyncio.wait_for(reader.done, timeout)
    finally:
        reader.close()

    def ms(t: float | None) -> float | None:
        return None if t is None else round((t - reader.sent_at) * 1000, 3)

    return {
        "status": reader.status,
        "error": reader.error if not reader.ended else None,
        "head_ms": ms(reader.head_at),
        "first_body_ms": ms(reader.first_body_at),
        "first_audio_ms": ms(reader.arrivals[0] if reader.arrivals else None),
        "total_ms": ms(time.monotonic()),
        "units": len(reader.arrivals),
        "chunks": reader.chunks,
        "ended": reader.ended,
    }
