"""Channels across a real cluster: two supervisors (two nodes of two workers each), one real
Redis. A channel lives on the worker that created it; its listeners on the other workers of
both nodes hear the same frames through their worker's mirror (one link per worker); speech
sent to any public port reaches it (307); the channel's worker SIGKILLed ends the others'
listeners with an end event, and the channel can be created again."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.channel_clients import EventReader, HttpListener, WhepListener
from tests.test_cluster import LOOPBACK, Node, RedisServer, cluster_of
from tests.test_cluster import redis_server as redis_server  # the fixture

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def nodes(redis_server, tmp_path_factory) -> Iterator[tuple[Node, Node, RedisServer]]:
    logs = tmp_path_factory.mktemp("channel-cluster")
    a, b = Node("a", logs, redis_server), Node("b", logs, redis_server)
    try:
        for node in (a, b):
            node.wait(cluster_of(2), timeout=90, what="in a cluster of two")
        yield a, b, redis_server
    finally:
        for node in (a, b):
            node.stop()


def _worker_url(node: Node, index: int) -> str:
    return f"http://{LOOPBACK}:{node.worker_ports[index]}"


async def test_listeners_over_two_workers_and_two_nodes_hear_the_same_frames(nodes):
    a, b, redis = nodes
    origin = _worker_url(a, 0)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{origin}/v1/channels",
                             json={"name": "all", "voice": "tone"}) as r:
            assert r.status == 201, await r.text()
        assert redis.command("GET", "vg:channel:all") == origin
        urls = [origin, _worker_url(a, 1), _worker_url(b, 0), _worker_url(b, 1)]
        http_listeners = [HttpListener(url, "all", http) for url in urls]
        for listener in http_listeners:
            listener.start()
        await asyncio.gather(*(h.started.wait() for h in http_listeners))
        whep = [WhepListener(url, "all", http) for url in (origin, _worker_url(b, 1))]
        await asyncio.gather(*(w.connect() for w in whep))
        public = HttpListener(b.url, "all", http)  # through node b's supervisor
        public.start()
        await public.started.wait()
        # captions: the words on the origin's and on another node's worker's events
        captions = [EventReader(url, "all", http) for url in (origin, _worker_url(b, 1))]
        await asyncio.gather(*(c.started.wait() for c in captions))
        await asyncio.sleep(0.5)  # every mirror's link is up
        async with http.post(f"{b.url}/v1/channels/all/speech",
                             json={"text": "hi there"}) as r:
            assert r.status == 202, await r.text()  # proxied, then sent on (307) to origin
        deadline = time.monotonic() + 10
        while len(whep[0].heard.speech()) < 45 or any(
                len(h.heard.speech()) < len(whep[0].heard.speech())
                for h in http_listeners):
            assert time.monotonic() < deadline, [len(h.heard.speech()) for h in http_listeners]
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        reference = whep[0].heard.speech()
        for listener in [*http_listeners, whep[1], public]:
            assert listener.heard.speech() == reference
        for caption in captions:  # each word once, in order, on both nodes
            assert [w["word"] for w in caption.of("word")] == ["hi", "there"], caption.events
        for url in urls[1:]:  # one link per worker, whatever its listener count
            async with http.get(f"{url}/healthz") as r:
                assert r.status == 200
        async with http.get(f"{origin}/v1/channels/all") as r:
            state = await r.json()
        # the origin's own listeners; the other workers' links are not listeners (3)
        assert state["listeners_here"] == {"whep": 1, "http": 1}, state
        assert state["mirror_links"] == 3
        # summed over the four workers of both nodes: 5 HTTP (one via a supervisor), 2 WHEP
        assert state["listeners"] == {"whep": 2, "http": 5}, state["workers"]
        assert state["census"]["asked"] == 4 and not state["census"]["partial"]
        for url in (b.url, a.url, _worker_url(b, 1)):  # any public port, any worker
            async with http.get(f"{url}/v1/channels") as r:
                assert r.status == 200
                listed = await r.json()
            assert listed["workers"]["answered"] == 4, listed["workers"]
            entry = {c["name"]: c for c in listed["channels"]}["all"]
            assert entry["listeners"] == {"whep": 2, "http": 5}
            assert entry["listener_count"] == 7 and entry["origin"] == origin
            assert len(entry["workers"]) == 4
        async with http.delete(f"{_worker_url(b, 0)}/v1/channels/all",
                               allow_redirects=True) as r:
            assert r.status == 204
        for listener in [*http_listeners, public]:
            await listener.wait(10)
        for w in whep:
            await w.close()


async def test_the_channels_worker_dying_ends_its_listeners_elsewhere(nodes):
    a, b, _ = nodes
    origin = _worker_url(a, 1)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{origin}/v1/channels",
                             json={"name": "doomed", "voice": "long"}) as r:
            assert r.status == 201, await r.text()
        elsewhere = [HttpListener(_worker_url(node, i), "doomed", http)
                     for node, i in ((a, 0), (b, 0))]
        for listener in elsewhere:
            listener.start()
        await asyncio.gather(*(h.started.wait() for h in elsewhere))
        events = EventReader(_worker_url(b, 1), "doomed", http)
        await events.started.wait()
        async with http.post(f"{origin}/v1/channels/doomed/speech", json={"text": "x"}) as r:
            assert r.status == 202
        deadline = time.monotonic() + 10
        while any(len(h.heard.speech()) < 20 for h in elsewhere):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        pid = {w["name"]: w for w in a.health()["workers"]}["w1"]["pid"]
        os.kill(pid, signal.SIGKILL)
        for listener in elsewhere:
            await listener.wait(10)
            assert listener.error is not None and "origin" in listener.error.message
        await asyncio.wait_for(events.task, 10)
        assert events.events[-1][0] == "channel_closed"
        # the channel can be created again, on another worker, once its entry has expired
        deadline = time.monotonic() + 15
        while True:
            async with http.post(f"{_worker_url(b, 0)}/v1/channels",
                                 json={"name": "doomed"}) as r:
                if r.status == 201:
                    break
                assert r.status == 409, await r.text()
            assert time.monotonic() < deadline, "the dead worker's entry did not expire"
            await asyncio.sleep(0.5)
        with contextlib.suppress(aiohttp.ClientError):
            async with http.delete(f"{_worker_url(b, 0)}/v1/channels/doomed") as r:
                assert r.status == 204


async def test_a_listeners_worker_dying_loses_only_its_listeners(nodes):
    a, b, _ = nodes
    # wait for the worker killed by the previous test to be back
    a.wait(cluster_of(2), timeout=60, what="whole again")
    b.wait(cluster_of(2), timeout=60, what="whole again")
    origin = _worker_url(a, 0)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{origin}/v1/channels",
                             json={"name": "steady", "voice": "long"}) as r:
            assert r.status == 201, await r.text()
        survivors = [HttpListener(url, "steady", http) for url in (origin, _worker_url(b, 1))]
        doomed = HttpListener(_worker_url(b, 0), "steady", http)
        for listener in (*survivors, doomed):
            listener.start()
        await asyncio.gather(*(h.started.wait() for h in (*survivors, doomed)))
        async with http.post(f"{origin}/v1/channels/steady/speech", json={"text": "x"}) as r:
            assert r.status == 202
        deadline = time.monotonic() + 10
        while any(len(h.heard.speech()) < 20 for h in (*survivors, doomed)):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        links_before = (await (await http.get(f"{origin}/v1/channels/steady")).json())
        pid = {w["name"]: w for w in b.health()["workers"]}["w0"]["pid"]
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        await asyncio.sleep(3.0)
        for listener in survivors:  # the others hear on, without a gap
            assert listener.heard.max_gap_s(killed_at - 0.5, killed_at + 3.0) < 1.0
            assert listener.task is not None and not listener.task.done()
        async with http.get(f"{origin}/v1/channels/steady") as r:
            after = await r.json()
        # the origin lost the dead worker's link, nothing else; the listing lost its listener
        assert after["mirror_links"] == links_before["mirror_links"] - 1
        assert after["listeners_here"] == links_before["listeners_here"]
        assert after["listeners"]["http"] == links_before["listeners"]["http"] - 1
        async with http.delete(f"{origin}/v1/channels/steady") as r:
            assert r.status == 204
        for listener in survivors:
            await listener.wait(10)
        await doomed.stop()
