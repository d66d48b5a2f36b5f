"""A channel heard on another worker: its mirror there takes the frames once over one link
and airs them to that worker's listeners (gateway/channels/mirror.py). Two gateways on
loopback; a table stands in for the cluster's Redis directory (tests/test_channel_cluster.py
runs the real one)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from gateway.api.channel_routes import CHANNELS
from tests.channel_clients import EventReader, HttpListener, WhepListener


class TableLocator:
    def __init__(self, table: dict[str, str], url: str) -> None:
        self.table = table
        self.self_url = url

    async def locate(self, name: str) -> str | None:
        return self.table.get(name)

    async def announce(self, names: Iterable[str]) -> None:
        for name in names:
            self.table[name] = self.self_url

    async def withdraw(self, name: str) -> None:
        if self.table.get(name) == self.self_url:
            del self.table[name]


async def _pair(start_gateway):
    table: dict[str, str] = {}
    a, b = await start_gateway(), await start_gateway()
    for gw in (a, b):
        gw.app[CHANNELS].locator = TableLocator(table, gw.url)
    return a, b, table


async def _until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_listeners_on_two_workers_hear_the_same_frames_over_one_link(start_gateway):
    a, b, table = await _pair(start_gateway)
    async with a.http.post(f"{a.url}/v1/channels", json={"name": "news"}) as r:
        assert r.status == 201
    assert table == {"news": a.url}
    async with b.http.post(f"{b.url}/v1/channels", json={"name": "news"}) as r:
        assert r.status == 409  # it exists, on a
    here = WhepListener(a.url, "news", a.http)
    there = [WhepListener(b.url, "news", b.http) for _ in range(2)]
    await asyncio.gather(here.connect(), *(w.connect() for w in there))
    http_there = [HttpListener(b.url, "news", b.http, fmt) for fmt in ("frames", "opus")]
    for h in http_there:
        h.start()
    await asyncio.gather(*(h.started.wait() for h in http_there))
    events_there = EventReader(b.url, "news", b.http)
    await events_there.started.wait()
    mirrors = b.app[CHANNELS].mirrors
    assert len(mirrors) == 1  # one link, however many listen on b
    await asyncio.wait_for(mirrors[0].connected.wait(), 5)
    origin = a.app[CHANNELS].get("news")
    assert origin is not None and origin.count_by_transport() == {"whep": 1, "http": 1}
    await asyncio.sleep(0.3)
    # speaking on b is sent to a (307), and heard everywhere
    async with b.http.post(f"{b.url}/v1/channels/news/speech", json={"text": "hi"}) as r:
        assert r.status == 202, await r.text()
        assert str(r.url).startswith(a.url)
    await _until(lambda: origin.conversation.speaker.counts["done"] == 1)
    await asyncio.sleep(0.5)  # the mirror's prebuffer and the link's write
    reference = here.heard.speech()
    assert len(reference) >= 45
    for listener in [*there, *http_there]:
        assert listener.heard.speech() == reference
    assert [e["text"] for e in events_there.of("caption")] == ["hi"]
    assert mirrors[0].state()["link"]["frames"] > len(reference)
    listener_id = there[0].location.rsplit("/", 1)[-1]
    async with b.http.get(f"{b.url}/v1/channels/news/listeners/{listener_id}") as r:
        assert r.status == 200  # a WHEP listener's resource is on its own worker
    # the channel ends on a: b's listeners get their end, b's mirror is gone
    async with a.http.delete(f"{a.url}/v1/channels/news") as r:
        assert r.status == 204
    for h in http_there:
        await h.wait(5)
    assert http_there[0].error is not None
    assert "channel closed" in http_there[0].error.message
    await asyncio.wait_for(events_there.task, 5)
    assert events_there.events[-1][0] == "channel_closed"
    await asyncio.gather(*(asyncio.wait_for(w.ended.wait(), 5) for w in there))
    await _until(lambda: not b.app[CHANNELS].mirrors)
    assert table == {}
    for w in [here, *there]:
        await w.close()


async def test_the_channels_worker_dying_ends_the_mirrors_listeners(start_gateway):
    a, b, _ = await _pair(start_gateway)
    async with a.http.post(f"{a.url}/v1/channels", json={"name": "live", "voice": "long"}) as r:
        assert r.status == 201
    listener = HttpListener(b.url, "live", b.http)
    listener.start()
    await listener.started.wait()
    events = EventReader(b.url, "live", b.http)
    await events.started.wait()
    async with a.http.post(f"{a.url}/v1/channels/live/speech", json={"text": "x"}) as r:
        assert r.status == 202
    await _until(lambda: len(listener.heard.speech()) > 20)
    # the origin's side of the link is cut as a dying process's would be (a reset)
    origin = a.app[CHANNELS].get("live")
    links = [x for x in origin.listeners if x.transport == "http"]
    assert len(links) == 1
    links[0]._abort()
    await listener.wait(5)
    assert listener.error is not None and "origin" in listener.error.message
    await asyncio.wait_for(events.task, 5)
    assert events.events[-1][0] == "channel_closed"
    assert events.events[-1][1]["reason"].startswith("origin")


async def test_a_mirror_with_no_listener_left_closes(start_gateway):
    a, b, _ = await _pair(start_gateway)
    async with a.http.post(f"{a.url}/v1/channels", json={"name": "q"}) as r:
        assert r.status == 201
    registry = b.app[CHANNELS]
    listener = HttpListener(b.url, "q", b.http)
    listener.start()
    await listener.started.wait()
    mirror = registry.mirrors[0]
    mirror.idle_s = 0.2
    await listener.stop()
    await _until(lambda: not registry.mirrors)
    await asyncio.wait_for(mirror.closed.wait(), 2)
    assert mirror.close_reason == "no listener left"
    origin = a.app[CHANNELS].get("q")
    await _until(lambda: not origin.listeners)  # the link has left the origin too
