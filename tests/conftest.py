"""Shared fixtures: a real gateway on 127.0.0.1 (real UDP, real aiortc peers) and clients."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from aiohttp import web

from gateway import aiortc_compat
from gateway.api.app import create_app
from gateway.api.routes import REGISTRY
from gateway.api.timeouts import connection_limits, guard_runner, serve_options
from gateway.client.peer import GatewayClient
from gateway.config import GatewayConfig
from gateway.session.registry import SessionRegistry
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

# a test needing a part that is not installed: skipped here, failed under CI (tests/installed.py)
from tests.installed import pytest_configure, pytest_runtest_setup  # noqa: F401

LOOPBACK = "127.0.0.1"


@dataclasses.dataclass
class RunningGateway:
    url: str
    app: web.Application
    http: aiohttp.ClientSession

    @property
    def registry(self) -> SessionRegistry:
        return self.app[REGISTRY]


def tone_voices() -> VoiceRegistry:
    return VoiceRegistry(
        [
            ToneSynthesizer(name="tone", frequency=440.0, seconds=1.0, sample_rate=24_000),
            ToneSynthesizer(name="tone48k", frequency=440.0, seconds=1.0, sample_rate=48_000),
            ToneSynthesizer(name="long", frequency=330.0, seconds=30.0, sample_rate=24_000),
        ]
    )


GatewayFactory = Callable[..., "AsyncIterator[RunningGateway]"]


@pytest.fixture
async def start_gateway() -> AsyncIterator[Callable[..., object]]:
    runners: list[web.AppRunner] = []
    sessions: list[aiohttp.ClientSession] = []

    async def start(voices: VoiceRegistry | None = None, **overrides: object) -> RunningGateway:
        config = dataclasses.replace(
            GatewayConfig(host=LOOPBACK, port=0, ice_hosts=(LOOPBACK,)), **overrides
        )
        app = create_app(config, voices or tone_voices())
        limits = connection_limits(config)
        runner = web.AppRunner(app, handler_cancellation=True,  # as gateway.cli runs it
                               **serve_options(limits))
        await runner.setup()
        guard_runner(runner, limits)
        site = web.TCPSite(runner, LOOPBACK, 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        http = aiohttp.ClientSession()
        sessions.append(http)
        return RunningGateway(f"http://{LOOPBACK}:{port}", app, http)

    yield start
    for http in sessions:
        await http.close()
    for runner in runners:
        await runner.cleanup()
    aiortc_compat.restrict_ice_hosts(None)


@pytest.fixture
async def gateway(start_gateway) -> RunningGateway:
    return await start_gateway()


@pytest.fixture
async def connect(gateway: RunningGateway) -> AsyncIterator[Callable[[], object]]:
    clients: list[GatewayClient] = []

    async def make() -> GatewayClient:
        client = GatewayClient(gateway.url, gateway.http, capture=True)  # tests read packets
        clients.append(client)
        await client.connect()
        return client

    yield make
    for client in clients:
        await client.close()
