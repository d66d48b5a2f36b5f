"""Listeners of a broadcast channel for tests and benches: a real aiortc WHEP peer, an HTTP
reader of ``/listen`` (frames or Ogg), an SSE reader; each records what it got and when."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from gateway import aiortc_compat
from gateway.client.ogg_reader import OggOpusReader
from gateway.http.frame_records import EndRecord, ErrorRecord, FrameRecord, FrameRecordParser
from gateway.media.opus_codec import silence_packet

SILENCE = silence_packet()


@dataclass
class Heard:
    payloads: list[bytes] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # monotonic arrival of each payload

    def add(self, payload: bytes) -> None:
        self.payloads.append(payload)
        self.times.append(time.monotonic())

    def speech(self) -> list[bytes]:
        return [p for p in self.payloads if p != SILENCE]

    def max_gap_s(self, since: float = 0.0, until: float = float("inf")) -> float:
        times = [t for t in self.times if since <= t <= until]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


class WhepListener:
    def __init__(self, base_url: str, channel: str, http: aiohttp.ClientSession) -> None:
        self.url = f"{base_url}/v1/channels/{channel}/whep"
        self.base_url = base_url
        self.http = http
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.heard = Heard()
        self.location: str | None = None
        self.connected = asyncio.Event()
        self.ended = asyncio.Event()

    async def connect(self, timeout: float = 10.0, headers: dict[str, str] | None = None
                      ) -> None:
        transceiver = self.pc.addTransceiver("audio", direction="recvonly")

        def on_rtp(packet: Any, arrival_ms: int) -> None:
            self.heard.add(bytes(packet.payload))

        aiortc_compat.tap_rtp(transceiver.receiver, on_rtp)

        @self.pc.on("connectionstatechange")
        def on_state() -> None:
            if self.pc.connectionState == "connected":
                self.connected.set()
            elif self.pc.connectionState in ("failed", "closed"):
                self.ended.set()

        await self.pc.setLocalDescription(await self.pc.createOffer())
        async with self.http.post(self.url, data=self.pc.localDescription.sdp, headers={
            "Content-Type": "application/sdp", **(headers or {})}) as response:
            body = await response.text()
            if response.status != 201:
                raise AssertionError(f"WHEP POST: {response.status} {body}")
            self.location = response.headers["Location"]
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=body, type="answer"))
        await asyncio.wait_for(self.connected.wait(), timeout)

    async def close(self) -> None:
        await self.pc.close()


class HttpListener:
    """Reads ``/listen`` in ``frames`` or ``opus`` (Ogg) format until it ends."""

    def __init__(self, base_url: str, channel: str, http: aiohttp.ClientSession,
                 fmt: str = "frames") -> None:
        self.url = f"{base_url}/v1/channels/{channel}/listen?format={fmt}"
        self.http = http
        self.format = fmt
        self.heard = Heard()
        self.error: ErrorRecord | None = None
        self.ended_cleanly = False
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        frames = FrameRecordParser() if self.format == "frames" else None
        ogg = OggOpusReader() if self.format == "opus" else None
        async with self.http.get(self.url) as response:
            assert response.status == 200, await response.text()
            self.started.set()
            async for chunk in response.content.iter_any():
                if frames is not None:
                    for record in frames.feed(chunk):
                        if isinstance(record, FrameRecord):
                            self.heard.add(record.payload)
                        elif isinstance(record, ErrorRecord):
                            self.error = record
                        elif isinstance(record, EndRecord):
                            self.ended_cleanly = True
                elif ogg is not None:
                    for packet in ogg.feed(chunk):
                        self.heard.add(packet)
            if ogg is not None:
                with contextlib.suppress(Exception):
                    ogg.close()
                    self.ended_cleanly = True

    async def wait(self, timeout: float = 10.0) -> None:
        assert self.task is not None
        await asyncio.wait_for(asyncio.shield(self.task), timeout)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task


class EventReader:
    def __init__(self, base_url: str, channel: str, http: aiohttp.ClientSession) -> None:
        self.url = f"{base_url}/v1/channels/{channel}/events"
        self.http = http
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.started = asyncio.Event()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async with self.http.get(self.url) as response:
            assert response.status == 200
            self.started.set()
            kind = None
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: ") and kind is not None:
                    self.events.append((kind, json.loads(line[6:])))
                    kind = None

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [data for k, data in self.events if k == kind]
