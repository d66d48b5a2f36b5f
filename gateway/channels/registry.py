"""The worker's channels by name, with caps, and the listeners' way in (WHEP answers).

With a locator (a worker of a cluster), a channel that lives on another worker is found there:
listeners here join this worker's ``Mirror`` of it (one link per worker and channel, made on
the first listener), speaking requests are sent to its worker (the routes answer a redirect).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator

import aiohttp
from aiortc import RTCConfiguration

from gateway.channels.broadcast import Broadcast
from gateway.channels.channel import Channel, ChannelClosed, ChannelFull
from gateway.channels.listener import DEFAULT_LAG, LagPolicy
from gateway.channels.locator import ChannelLocator, LocatorUnavailable
from gateway.channels.metrics import CHANNEL_METRICS
from gateway.channels.mirror import Mirror
from gateway.channels.whep_listener import WhepListener
from gateway.conversation.options import SessionOptions
from gateway.net.udp_mux import MuxGroup
from gateway.speech.phrase_cache import PhraseCache
from gateway.tts.base import Synthesizer

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

__all__ = ["ChannelClosed", "ChannelExists", "ChannelFull", "ChannelLimitReached",
           "ChannelRegistry", "InvalidChannelName"]


class ChannelExists(Exception):
    pass


class ChannelLimitReached(Exception):
    pass


class InvalidChannelName(ValueError):
    pass


class ChannelRegistry:
    def __init__(
        self,
        rtc_config: RTCConfiguration,
        options: SessionOptions,
        max_channels: int = 16,
        max_listeners: int = 1000,
        lag: LagPolicy = DEFAULT_LAG,
        phrase_cache: PhraseCache | None = None,
        udp_mux: MuxGroup | None = None,
    ) -> None:
        self.rtc_config = rtc_config
        self.options = options
        self.max_channels = max_channels
        self.max_listeners = max_listeners  # per channel, and the most one may ask for
        self.lag = lag
        self.phrase_cache = phrase_cache
        self.udp_mux = udp_mux
        self._channels: dict[str, Channel] = {}
        self._mirrors: dict[str, Mirror] = {}
        self._mirroring: dict[str, asyncio.Future[Mirror | None]] = {}
        self.locator: ChannelLocator | None = None  # set by the cluster worker
        self._http: aiohttp.ClientSession | None = None  # the mirrors' links
        self.created_total = 0
        CHANNEL_METRICS.source = self  # the latest app's (one per process outside tests)

    def __len__(self) -> int:
        return len(self._channels)

    def __iter__(self) -> Iterator[Channel]:
        return iter(list(self._channels.values()))

    def get(self, name: str) -> Channel | None:
        return self._channels.get(name)

    def create(self, name: str, voice: Synthesizer, max_listeners: int | None = None
               ) -> Channel:
        """Raises InvalidChannelName, ChannelExists, ChannelLimitReached, ValueError."""
        if not NAME.fullmatch(name):
            raise InvalidChannelName(
                "a channel name is 1-64 letters, digits, '_', '-' or '.', starting with a "
                "letter or digit")
        if name in self._channels:
            raise ChannelExists(f"a channel named {name!r} exists")
        if len(self._channels) >= self.max_channels:
            raise ChannelLimitReached(f"the gateway is at its cap of {self.max_channels} "
                                      "channels")
        limit = self.max_listeners if max_listeners is None else max_listeners
        if not 1 <= limit <= self.max_listeners:
            raise ValueError(f"max_listeners must be 1..{self.max_listeners}")
        channel = Channel(name, voice, self.options.encoder, limit, self.lag,
                          self.phrase_cache, self.options.max_pending_utterances)
        self._channels[name] = channel
        self.created_total += 1
        return channel

    def broadcast(self, name: str) -> Broadcast | None:
        """The channel, or a live mirror of it, here (none is made)."""
        return self._channels.get(name) or self._mirrors.get(name)

    @property
    def mirrors(self) -> list[Mirror]:
        return list(self._mirrors.values())

    async def open(self, name: str, voice: Synthesizer, max_listeners: int | None = None
                   ) -> Channel:
        """``create``, refused if the channel lives on another worker, then announced."""
        if self.locator is not None and NAME.fullmatch(name) and name not in self._channels:
            with contextlib.suppress(LocatorUnavailable):
                origin = await self.locator.locate(name)
                if origin is not None and origin != self.locator.self_url:
                    raise ChannelExists(f"a channel named {name!r} exists (on {origin})")
        channel = self.create(name, voice, max_listeners)
        if self.locator is not None:
            with contextlib.suppress(LocatorUnavailable):
                await self.locator.announce([name])
        return channel

    async def locate(self, name: str) -> str | None:
        """The base URL of the worker where ``name`` lives, if not here (None: nowhere)."""
        if name in self._channels or self.locator is None:
            return None
        try:
            origin = await self.locator.locate(name)
        except LocatorUnavailable:
            return None
        return None if origin == self.locator.self_url else origin

    async def listenable(self, name: str, authorization: str | None = None
                         ) -> Broadcast | None:
        """What a listener of ``name`` joins here: the channel, or this worker's mirror of it
        (made now, its link started, if the channel lives elsewhere); None: no such channel."""
        channel = self._channels.get(name)
        if channel is not None:
            return channel
        mirror = self._mirrors.get(name)
        if mirror is not None and mirror.close_reason is None:
            return mirror
        pending = self._mirroring.get(name)
        if pending is not None:  # another request is making it: share its outcome
            return await asyncio.shield(pending)
        future: asyncio.Future[Mirror | None] = asyncio.get_running_loop().create_future()
        self._mirroring[name] = future
        try:
            origin = await self.locate(name)
            mirror = None
            if origin is not None:
                mirror = self._mirror(name, origin, authorization)
            future.set_result(mirror)
            return mirror
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters, if any, get it
            raise
        finally:
            self._mirroring.pop(name, None)

    def client(self) -> aiohttp.ClientSession:
        """The one client session to other workers (the mirrors' links, the census)."""
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, connect=5.0, sock_connect=5.0),
                auto_decompress=False)
        return self._http

    def _mirror(self, name: str, origin: str, authorization: str | None) -> Mirror:
        mirror = Mirror(name, origin, self.client(), self.max_listeners, self.lag, authorization,
                        self_url=self.locator.self_url if self.locator is not None else "")
        mirror.on_closed = self._forget_mirror
        self._mirrors[name] = mirror
        mirror.start()
        return mirror

    def _forget_mirror(self, mirror: Mirror) -> None:
        if self._mirrors.get(mirror.name) is mirror:
            del self._mirrors[mirror.name]
            CHANNEL_METRICS.fold(mirror)

    async def delete(self, name: str, reason: str = "deleted") -> bool:
        channel = self._channels.get(name)
        if channel is None:
            return False
        try:
            await channel.close(reason)
        finally:
            CHANNEL_METRICS.fold(channel)
            self._channels.pop(name, None)
            if self.locator is not None:
                with contextlib.suppress(LocatorUnavailable):
                    await self.locator.withdraw(name)
        return True

    async def add_whep(self, channel: Broadcast, offer_sdp: str) -> tuple[WhepListener, str]:
        """A WHEP listener of ``channel``: its answer. Raises SdpRejected, ChannelFull,
        ChannelClosed."""
        if len(channel.listeners) >= channel.max_listeners:
            raise ChannelFull(f"channel {channel.name!r} has its maximum of "
                              f"{channel.max_listeners} listeners")
        listener, answer = await WhepListener.answer(
            offer_sdp, self.rtc_config, self.options, self.lag, self.udp_mux
        )
        try:
            channel.join(listener)
        except BaseException:
            await listener.close("not joined")
            raise
        return listener, answer

    async def close_all(self) -> None:
        await asyncio.gather(*(m.close("gateway shutting down") for m in self.mirrors),
                             return_exceptions=True)
        await asyncio.gather(*(self.delete(c.name, "gateway shutting down") for c in self),
                             return_exceptions=True)
        if self._http is not None:
            await self._http.close()
