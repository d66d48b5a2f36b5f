"""The phrase cache inside the gateway: a repeated reply is replayed, never synthesised again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.api.routes import CACHE
from gateway.client.peer import GatewayClient
from gateway.config import parse_config
from gateway.tts.base import PcmChunk, SynthesisError
from gateway.tts.registry import VoiceRegistry
from gateway.tts.tone import ToneSynthesizer

TEXT = "Hello, thanks for calling."


class CountingVoice:
    """A tone voice that records every text it is asked to synthesise; can be told to fail."""

    def __init__(self, name: str = "counted", seconds: float = 0.5) -> None:
        self.name = name
        self.inner = ToneSynthesizer(name=name, frequency=300.0, seconds=seconds)
        self.calls: list[str] = []
        self.fail_next = False

    async def stream(self, text: str) -> AsyncIterator[PcmChunk]:
        self.calls.append(text)
        if self.fail_next:
            self.fail_next = False
            raise SynthesisError("upstream said no")
        async for chunk in self.inner.stream(text):
            yield chunk

    async def close(self) -> None:
        return None


@pytest.fixture
def voice() -> CountingVoice:
    return CountingVoice()


async def connected(gateway) -> GatewayClient:
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    return client


async def speak(client: GatewayClient, text: str, voice: str = "counted") -> dict:
    result = await client.say(text, voice=voice)
    return await client.wait_utterance(result.utterance["id"])


def payloads(client: GatewayClient, state: dict) -> list[bytes]:
    first = state["first_seq"]
    by_seq = {p.seq % 65536: p.payload for p in client.capture.packets}
    return [by_seq[(first + i) % 65536] for i in range(state["frames_sent"])]


async def cache_stats(gateway) -> dict:
    async with gateway.http.get(f"{gateway.url}/v1/cache") as response:
        assert response.status == 200
        return await response.json()


async def test_a_repeat_is_replayed_without_synthesis_or_encoding(start_gateway, voice):
    gateway = await start_gateway(voices=VoiceRegistry([voice]))
    a, b = await connected(gateway), await connected(gateway)
    try:
        first = await speak(a, TEXT)
        assert first["state"] == "done" and not first["cached"] and first["frames_encoded"] == 25
        # Another session, the same words with other spacing: served from the shared cache.
        again = await speak(b, "  Hello,  thanks for\ncalling. ")
        assert again["state"] == "done" and again["cached"]
        assert again["frames_encoded"] == 0 and again["frames_sent"] == 25
        assert voice.calls == [TEXT]  # synthesised once
        assert payloads(b, again) == payloads(a, first)  # the same Opus packets on the wire
        stats = await cache_stats(gateway)
        assert (stats["hits"], stats["misses"], stats["stores"], stats["entries"]) == (1, 1, 1, 1)
        assert 0 < stats["bytes"] <= stats["max_bytes"] == 64 * 1024 * 1024
    finally:
        await a.close()
        await b.close()


async def test_failed_and_interrupted_speech_is_not_cached(start_gateway, voice):
    long = CountingVoice("long", seconds=30.0)
    gateway = await start_gateway(voices=VoiceRegistry([voice, long]))
    client = await connected(gateway)
    try:
        voice.fail_next = True
        assert (await speak(client, TEXT))["state"] == "failed"
        cut = await client.say("a long answer", voice="long")
        await asyncio.wait_for(client.capture.wait_packets(len(client.capture.packets) + 5), 5)
        await client.interrupt()
        assert (await client.wait_utterance(cut.utterance["id"]))["state"] == "interrupted"
        assert (await cache_stats(gateway))["entries"] == 0
        # Both are synthesised afresh next time.
        assert not (await speak(client, TEXT))["cached"]
        assert voice.calls == [TEXT, TEXT]
    finally:
        await client.close()


async def test_zero_megabytes_turns_it_off(start_gateway, voice):
    gateway = await start_gateway(voices=VoiceRegistry([voice]), phrase_cache_mb=0)
    client = await connected(gateway)
    try:
        for _ in range(2):
            assert not (await speak(client, TEXT))["cached"]
        assert voice.calls == [TEXT, TEXT]
        stats = await cache_stats(gateway)
        assert not stats["enabled"] and stats["hits"] == 0
    finally:
        await client.close()


async def test_persisted_cache_serves_a_restarted_gateway(start_gateway, voice, tmp_path: Path):
    first = await start_gateway(voices=VoiceRegistry([voice]), phrase_cache_dir=tmp_path)
    client = await connected(first)
    try:
        original = payloads(client, await speak(client, TEXT))
    finally:
        await client.close()
    first.app[CACHE].flush()  # the file is written by the cache's I/O thread
    stats = await cache_stats(first)
    assert stats["disk"]["directory"] == str(tmp_path) and stats["disk"]["writes"] == 1
    second = await start_gateway(voices=VoiceRegistry([voice]), phrase_cache_dir=tmp_path)
    assert (await cache_stats(second))["disk"]["loaded"] == 1
    client = await connected(second)
    try:
        replayed = await speak(client, TEXT)
        assert replayed["cached"] and replayed["frames_encoded"] == 0
        assert payloads(client, replayed) == original
    finally:
        await client.close()
    assert voice.calls == [TEXT]


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    config = parse_config([])
    assert config.phrase_cache_mb == 64 and config.phrase_cache_dir is None
    config = parse_config(["--phrase-cache-mb", "8.5", "--phrase-cache-dir", str(tmp_path)])
    assert config.phrase_cache_mb == 8.5 and config.phrase_cache_dir == tmp_path
    monkeypatch.setenv("GATEWAY_PHRASE_CACHE_MB", "0")
    monkeypatch.setenv("GATEWAY_PHRASE_CACHE_DIR", str(tmp_path / "c"))
    config = parse_config([])
    assert config.phrase_cache_mb == 0 and config.phrase_cache_dir == tmp_path / "c"
    assert parse_config(["--phrase-cache-mb", "2"]).phrase_cache_mb == 2
