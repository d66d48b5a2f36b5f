"""The cluster's channels and their listeners: every worker's own view, gathered and summed.

A channel lives on one worker, its listeners on any: the origin's own, and each other worker's
through its mirror (whose link the origin does not count as a listener). So ``GET
/v1/channels`` asks every live worker of the cluster (the locator's list) for its own view
(``GET /v1/channels/-/local``: ``local_view``; ``-`` starts no channel name) at once, each
bounded by ``timeout_s``, at most ``MAX_WORKERS`` of them, and sums each channel's listeners
over the origin and its mirrors. A worker that does not answer in time is named in
``unreachable`` and its listeners are missing from the sums (the answer says it is partial,
it does not wait). A lone gateway (no locator) is its own cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from gateway.channels.broadcast import Broadcast
from gateway.channels.locator import LocatorUnavailable

LOCAL_VIEW = "/v1/channels/-/local"
TIMEOUT_S = 1.0  # per worker asked
MAX_WORKERS = 64  # the most asked for one listing
MAX_VIEW_BYTES = 1 << 20  # one worker's answer


class Registry(Protocol):
    """What the census reads of the worker's ChannelRegistry."""

    locator: Any

    def __iter__(self) -> Any: ...

    @property
    def mirrors(self) -> list[Any]: ...

    def client(self) -> aiohttp.ClientSession: ...


def _counts(broadcast: Broadcast) -> dict[str, int]:
    return broadcast.count_by_transport()


def local_view(registry: Registry, only: str | None = None) -> dict[str, Any]:
    """This worker's channels (their own listeners) and mirrors (theirs), JSON."""
    url = registry.locator.self_url if registry.locator is not None else ""
    channels = []
    for channel in registry:
        if only is not None and channel.name != only:
            continue
        current = channel.conversation.speaker.current
        channels.append({
            "name": channel.name, "voice": channel.voice.name,
            "max_listeners": channel.max_listeners, "listeners": _counts(channel),
            "mirror_links": channel.mirror_links,
            "frames_sent": channel.air.stats.speech_frames,
            "playing": None if current is None else current.id})
    mirrors = [{"name": m.name, "origin": m.origin, "listeners": _counts(m)}
               for m in registry.mirrors
               if m.close_reason is None and (only is None or m.name == only)]
    return {"worker": url, "channels": channels, "mirrors": mirrors}


@dataclass
class Census:
    """Each channel of the cluster (its origin's entry, listeners summed) and who answered."""

    channels: dict[str, dict[str, Any]] = field(default_factory=dict)
    asked: int = 0
    unreachable: list[str] = field(default_factory=list)

    def workers_json(self) -> dict[str, Any]:
        return {"asked": self.asked, "answered": self.asked - len(self.unreachable),
                "unreachable": self.unreachable, "partial": bool(self.unreachable)}


async def _view_of(http: aiohttp.ClientSession, url: str, headers: dict[str, str],
                   only: str | None, timeout_s: float) -> dict[str, Any] | None:
    params = {} if only is None else {"name": only}
    try:
        async with asyncio.timeout(timeout_s):
            async with http.get(f"{url}{LOCAL_VIEW}", params=params,
                                headers=headers) as response:
                if response.status != 200:
                    return None
                body = await response.content.read(MAX_VIEW_BYTES + 1)
                if len(body) > MAX_VIEW_BYTES:
                    return None
                data = json.loads(body)
                return data if isinstance(data, dict) else None
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        return None


def _add(into: dict[str, int], counts: Any) -> None:
    if isinstance(counts, dict):
        for transport, n in counts.items():
            if isinstance(transport, str) and isinstance(n, int) and n >= 0:
                into[transport] = into.get(transport, 0) + n


async def take(registry: Registry, authorization: str | None = None, only: str | None = None,
               timeout_s: float = TIMEOUT_S) -> Census:
    """Ask every worker (this one without a request) and sum; ``only``: one channel."""
    views = [local_view(registry, only)]
    census = Census(asked=1)
    locator = registry.locator
    if locator is not None:
        peers: list[str] = []
        with contextlib.suppress(LocatorUnavailable):
            peers = [u for u in await locator.workers() if u != locator.self_url]
        peers = sorted(set(peers))[:MAX_WORKERS - 1]
        headers = {"Authorization": authorization} if authorization else {}
        http = registry.client()
        answers = await asyncio.gather(
            *(_view_of(http, url, headers, only, timeout_s) for url in peers))
        census.asked += len(peers)
        for url, view in zip(peers, answers, strict=True):
            if view is None:
                census.unreachable.append(url)
            else:
                views.append(view)
    for view in views:
        for entry in view.get("channels") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                name = entry["name"]
                here = dict(entry.get("listeners") or {})
                census.channels[name] = {
                    **entry, "origin": view.get("worker", ""),
                    "listeners": dict(here),
                    "workers": [{"url": view.get("worker", ""), "role": "origin",
                                 "listeners": here}]}
    for view in views:
        for entry in view.get("mirrors") or []:
            if not isinstance(entry, dict):
                continue
            summary = census.channels.get(entry.get("name"))  # type: ignore[arg-type]
            if summary is None:  # its origin did not answer: not listed
                continue
            _add(summary["listeners"], entry.get("listeners"))
            summary["workers"].append({"url": view.get("worker", ""), "role": "mirror",
                                       "listeners": entry.get("listeners")})
    for summary in census.channels.values():
        summary["listener_count"] = sum(summary["listeners"].values())
    return census
