"""The worker's channels by name, with caps, and the listeners' way in (WHEP answers)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

from aiortc import RTCConfiguration

from gateway.channels.channel import Channel, ChannelClosed, ChannelFull
from gateway.channels.listener import DEFAULT_LAG, LagPolicy
from gateway.channels.metrics import CHANNEL_METRICS
from gateway.channels.whep_listener import WhepListener
from gateway.net.udp_mux import MuxGroup
from gateway.session.options import SessionOptions
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

    async def delete(self, name: str, reason: str = "deleted") -> bool:
        channel = self._channels.get(name)
        if channel is None:
            return False
        try:
            await channel.close(reason)
        finally:
            CHANNEL_METRICS.fold(channel)
            self._channels.pop(name, None)
        return True

    async def add_whep(self, channel: Channel, offer_sdp: str) -> tuple[WhepListener, str]:
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
        await asyncio.gather(*(self.delete(c.name, "gateway shutting down") for c in self),
                             return_exceptions=True)
