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
    def __init__(self, table: dict[str, str], url: str, workers: list[str] | None = None
                 ) -> None:
        self.table = table
        self.self_url = url
        self.peers = workers if workers is not None else [url]

    async def workers(self) -> list[str]:
        return list(self.peers)

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
    workers = [a.url, b.url]
    for gw in (a, b):
        gw.app[CHANNELS].locator = TableLocator(table, gw.url, workers)
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
    # b's mirror link is not a listener at a: b's listeners are counted on b
    assert origin is not None and origin.count_by_transport() == {"whep": 1, "http": 0}
    assert origin.mirror_links == 1
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
    links = [x for x in origin.listeners if x.transport == "mirror"]
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


async def _json(gw, path: str) -> dict:
    async with gw.http.get(f"{gw.url}{path}") as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_the_listing_sums_each_channels_listeners_over_the_workers(start_gateway):
    a, b, _ = await _pair(start_gateway)
    for gw, name in ((a, "on-a"), (b, "on-b")):
        async with gw.http.post(f"{gw.url}/v1/channels", json={"name": name}) as r:
            assert r.status == 201
    listeners = [HttpListener(a.url, "on-a", a.http),
                 *(HttpListener(b.url, "on-a", b.http) for _ in range(2)),
                 HttpListener(a.url, "on-b", a.http)]
    for listener in listeners:
        listener.start()
    await asyncio.gather(*(h.started.wait() for h in listeners))
    whep = WhepListener(b.url, "on-a", b.http)
    await whep.connect()
    for gw in (a, b):  # the same answer from either worker
        listed = await _json(gw, "/v1/channels")
        assert listed["workers"] == {"asked": 2, "answered": 2, "unreachable": [],
                                     "partial": False}
        by_name = {c["name"]: c for c in listed["channels"]}
        assert sorted(by_name) == ["on-a", "on-b"]
        assert by_name["on-a"]["listeners"] == {"whep": 1, "http": 3}
        assert by_name["on-a"]["listener_count"] == 4
        assert by_name["on-a"]["origin"] == a.url
        assert {(w["url"], w["role"]) for w in by_name["on-a"]["workers"]} == {
            (a.url, "origin"), (b.url, "mirror")}
        assert by_name["on-b"]["listeners"] == {"whep": 0, "http": 1}
        assert by_name["on-b"]["origin"] == b.url
    state = await _json(a, "/v1/channels/on-a")
    assert state["listeners"] == {"whep": 1, "http": 3}
    assert state["listeners_here"] == {"whep": 0, "http": 1}
    assert state["mirror_links"] == 1
    # workers that do not answer (refused; accepted but silent) cost at most the timeout
    held: list[asyncio.StreamWriter] = []
    silent = await asyncio.start_server(lambda _r, w: held.append(w), "127.0.0.1", 0)
    hung = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}"
    dead = "http://127.0.0.1:9"  # nothing listens there: refused at once
    for gw in (a, b):
        gw.app[CHANNELS].locator.peers += [dead, hung]
    t0 = time.monotonic()
    listed = await _json(b, "/v1/channels")
    assert time.monotonic() - t0 < 2.5
    assert listed["workers"]["unreachable"] == sorted([dead, hung])
    assert listed["workers"]["partial"] and listed["workers"]["asked"] == 4
    assert {c["name"]: c["listener_count"] for c in listed["channels"]} == {"on-a": 4,
                                                                           "on-b": 1}
    silent.close()
    for writer in held:
        writer.close()
    await whep.close()
    for listener in listeners:
        await listener.stop()


def _spy_words(broadcast, progress) -> list[tuple[dict, int]]:
    """Each ``word`` event ``broadcast`` publishes, with ``progress()`` at that moment."""
    seen: list[tuple[dict, int]] = []
    publish = broadcast.events.publish

    def spy(kind: str, **data) -> None:
        if kind == "word":
            seen.append((data, progress(data)))
        publish(kind, **data)

    broadcast.events.publish = spy
    return seen


async def test_captions_carry_each_word_once_its_audio_is_aired_here_and_there(
        start_gateway):
    a, b, _ = await _pair(start_gateway)
    async with a.http.post(f"{a.url}/v1/channels", json={"name": "talk"}) as r:
        assert r.status == 201
    listener = HttpListener(b.url, "talk", b.http)  # b mirrors the channel
    listener.start()
    await listener.started.wait()
    here, there = EventReader(a.url, "talk", a.http), EventReader(b.url, "talk", b.http)
    await asyncio.gather(here.started.wait(), there.started.wait())
    channel = a.app[CHANNELS].get("talk")
    mirror = b.app[CHANNELS].mirrors[0]
    await asyncio.wait_for(mirror.connected.wait(), 5)
    link = next(x for x in channel.listeners if x.transport == "mirror")
    speaker = channel.conversation.speaker
    # at the origin: the frames of the utterance aired so far; at b: every frame the air
    # took from the link (the origin's link frames offered by the origin's word, at most)

    def aired(data: dict) -> int:  # the frames of the word's utterance aired so far
        playing = [speaker.current, *speaker.recent]
        utterance = next(u for u in playing if u is not None and u.id == data["utterance"])
        return utterance.primary.frames

    origin_words = _spy_words(channel, aired)
    link_at_word: list[int] = []
    publish = channel.events.publish

    def mark(kind: str, **data) -> None:
        if kind == "word":
            link_at_word.append(link.frames_in)
        publish(kind, **data)

    channel.events.publish = mark
    mirror_words = _spy_words(mirror, lambda _: mirror.air.stats.taken)
    text = "one two three four five six"
    async with a.http.post(f"{a.url}/v1/channels/talk/speech", json={"text": text}) as r:
        assert r.status == 202
    await _until(lambda: len(there.of("word")) == 6, timeout=15)
    words = [(w["word"], w["start_ms"]) for w in here.of("word")]
    assert [w for w, _ in words] == text.split()  # each once, in order
    assert [s for _, s in words] == sorted(s for _, s in words)
    assert [(w["word"], w["start_ms"]) for w in there.of("word")] == words
    for data, aired in origin_words:  # not before the frame it starts in was aired
        assert aired * 20 > data["start_ms"], (data, aired)
    for (data, taken), offered in zip(mirror_words, link_at_word, strict=True):
        assert taken >= offered, (data, taken, offered)  # aired at b too
    await listener.stop()
