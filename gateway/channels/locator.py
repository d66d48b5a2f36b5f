"""Where a channel lives, across workers: what the registry asks of the cluster.

A channel lives on the worker that created it (its speaker, its origin air). The cluster
(gateway/cluster/channel_locator.py: Redis) implements this; a lone gateway has none, and then
every channel is local. ``locate`` answers a channel's origin worker's base URL (or None);
``announce`` says this worker is the origin of these channels (refreshed: entries expire when
their worker dies), ``withdraw`` that it no longer is; ``workers`` the base URLs of every
live worker of the cluster, this one included (a listing asks each: channels/census.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class ChannelLocator(Protocol):
    @property
    def self_url(self) -> str: ...

    async def locate(self, name: str) -> str | None: ...

    async def announce(self, names: Iterable[str]) -> None: ...

    async def withdraw(self, name: str) -> None: ...

    async def workers(self) -> list[str]: ...


class LocatorUnavailable(Exception):
    """The directory could not be asked (Redis down): a channel elsewhere cannot be found."""
