"""Closing a session, from either side, leaves no task, thread or peer connection behind."""

from __future__ import annotations

import asyncio
import gc
import threading

from aiortc import RTCPeerConnection

from gateway.client.peer import GatewayClient

SHARED_POOLS = ("opus-", "piper-")


def live_peer_connections() -> list[RTCPeerConnection]:
    gc.collect()
    return [
        o for o in gc.get_objects()
        if isinstance(o, RTCPeerConnection) and o.connectionState != "closed"
    ]


def _is_http_keepalive(task: asyncio.Task) -> bool:
    """aiohttp's per-connection handler: an HTTP keep-alive connection, not a session's task."""
    return task.get_coro().__qualname__ == "RequestHandler.start"


async def settle_tasks(baseline: set[asyncio.Task], timeout: float = 5.0) -> set[asyncio.Task]:
    """Tasks beyond the baseline that are still pending, after letting closes finish."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        extra = {
            t for t in asyncio.all_tasks()
            if t not in baseline and not t.done() and not _is_http_keepalive(t)
        }
        extra.discard(asyncio.current_task())
        if not extra or loop.time() > deadline:
            return extra
        await asyncio.wait(extra, timeout=deadline - loop.time())


async def test_delete_ends_every_task_thread_and_peer(gateway):
    baseline_tasks = set(asyncio.all_tasks())
    baseline_threads = set(threading.enumerate())
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session = next(iter(gateway.registry))
    result = await client.say("long", voice="long")
    await client.capture.wait_packets(3)  # some audio is flowing
    assert session.webrtc.pc.connectionState == "connected"
    await client.close(delete=True)  # DELETE, then the client closes its side
    assert len(gateway.registry) == 0 and session.closed.is_set()
    assert session.webrtc.pc.connectionState == "closed"
    assert session.speaker.get(result.utterance["id"]).state.value == "interrupted"
    assert await settle_tasks(baseline_tasks) == set()
    # Process-wide bounded pools (Opus encoding, synthesis) may start their threads lazily
    # during the test; they are shared, not the session's. Nothing else may remain.
    extra_threads = set(threading.enumerate()) - baseline_threads
    assert {t.name for t in extra_threads if not t.name.startswith(SHARED_POOLS)} == set()
    assert live_peer_connections() == []


async def test_client_disconnect_closes_the_session(gateway):
    baseline_tasks = set(asyncio.all_tasks())
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session = next(iter(gateway.registry))
    await client.say("long", voice="long")
    # The listener goes away without DELETE: its DTLS close reaches the gateway.
    await client.close(delete=False)
    await asyncio.wait_for(session.closed.wait(), timeout=10)
    assert len(gateway.registry) == 0
    assert session.close_reason.startswith("peer connection")
    assert await settle_tasks(baseline_tasks) == set()
    assert live_peer_connections() == []


async def test_many_sessions_open_and_close_cleanly(gateway):
    baseline_tasks = set(asyncio.all_tasks())
    clients = [GatewayClient(gateway.url, gateway.http) for _ in range(5)]
    await asyncio.gather(*(c.connect() for c in clients))
    assert len(gateway.registry) == 5
    results = await asyncio.gather(*(c.say("hi", voice="tone") for c in clients))
    states = await asyncio.gather(
        *(c.wait_utterance(r.utterance["id"]) for c, r in zip(clients, results))
    )
    assert all(s["state"] == "done" and s["frames_sent"] == 50 for s in states)
    await asyncio.gather(*(c.close() for c in clients))
    assert len(gateway.registry) == 0
    assert await settle_tasks(baseline_tasks) == set()
    assert live_peer_connections() == []
