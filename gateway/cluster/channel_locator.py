"""Channels across the cluster's workers: where each lives, in Redis (``vg:channel:{name}``).

The worker that creates a channel announces it (its advertised URL) and refreshes the entry
with its heartbeat (``HEARTBEAT_S``, expiring after ``WORKER_TTL_S``): a worker that dies
leaves no entry for longer than that, so the channel can be created again elsewhere. Other
workers look a name up when a listener asks for it there and mirror it (channels/mirror.py).
Redis unreachable: a channel elsewhere cannot be found (404), local ones are unaffected.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.channels.locator import LocatorUnavailable
from gateway.cluster.directory import RedisDirectory, Unavailable


class RedisChannelLocator:
    def __init__(self, directory: RedisDirectory, self_url: str) -> None:
        self.directory = directory
        self._url = self_url.rstrip("/")

    @property
    def self_url(self) -> str:
        return self._url

    async def locate(self, name: str) -> str | None:
        try:
            return await self.directory.channel_origin(name)
        except Unavailable as exc:
            raise LocatorUnavailable(str(exc)) from exc

    async def announce(self, names: Iterable[str]) -> None:
        try:
            await self.directory.put_channels(self._url, names)
        except Unavailable as exc:
            raise LocatorUnavailable(str(exc)) from exc

    async def withdraw(self, name: str) -> None:
        try:
            await self.directory.drop_channel(name, self._url)
        except Unavailable as exc:
            raise LocatorUnavailable(str(exc)) from exc

    async def workers(self) -> list[str]:
        try:
            found = await self.directory.workers()
        except Unavailable as exc:
            raise LocatorUnavailable(str(exc)) from exc
        return sorted({w.url.rstrip("/") for w in found} | {self._url})
