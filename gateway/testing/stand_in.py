"""What the upstream stand-ins (chat completions, transcription, CosyVoice) share: a schedule
of injected faults, and -- for the plain HTTP ones -- an aiohttp server on a loopback port with
``url``, ``start``/``stop`` and ``async with``.

A fault name set on ``faults`` applies to every request; a list applies one per request in
order (None: no fault for that one), so a test can say "fail the first, answer the second".
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web


class FaultSchedule:
    """``faults`` checked against the stand-in's ``FAULTS``; ``_next_fault`` per request."""

    FAULTS: tuple[str, ...] = ()
    _faults: Any = None

    @property
    def faults(self) -> Any:
        return self._faults

    @faults.setter
    def faults(self, value: Any) -> None:
        """A fault name applies to every request; a list, one per request in order; None: off."""
        names = value if isinstance(value, list) else [value]
        bad = [n for n in names if n is not None and n not in self.FAULTS]
        if bad:
            raise ValueError(f"unknown faults {bad}; known: {', '.join(self.FAULTS)}")
        self._faults = list(value) if isinstance(value, list) else value

    def _next_fault(self) -> Any:
        if isinstance(self._faults, list):
            return self._faults.pop(0) if self._faults else None
        return self._faults


class HttpStandIn(FaultSchedule):
    """An aiohttp server on loopback only, answering every path with ``_handle``; port 0
    picks a free one."""

    gate: asyncio.Event | None = None  # set by tests that pause a stream; opened at stop

    def __init__(self, host: str, port: int) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the stand-in binds loopback only, not {host!r}")
        self.host, self.port = host, port
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    @property
    def url(self) -> str:
        """The API base a client is given (``.../v1``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._stopping.set()
        if self.gate is not None:
            self.gate.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> Any:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raise NotImplementedError
