"""The channel routes' request bodies (api/channel_routes.py), for validation and the API
document."""

from __future__ import annotations

from pydantic import Field

from gateway.api.models import Model


class ChannelCreate(Model):
    name: str = Field(description="the channel's name: 1-64 of [A-Za-z0-9_.-]")
    voice: str | None = Field(None, description="a voice from /v1/voices (default: the first)")
    max_listeners: int | None = Field(None, ge=1, description="listeners at most (default "
                                      "and ceiling: --channel-max-listeners)")


class ChannelSummary(Model):
    name: str
    voice: str
    max_listeners: int
    listeners: dict[str, int] = Field(description="live listeners by transport")
    listener_count: int
    playing: str | None = Field(description="the utterance on air")
    location: str
    whep: str
    listen: str
    events: str
    speech: str


class WorkerListeners(Model):
    url: str = Field(description="the worker's advertised URL")
    role: str = Field(description="origin (the channel's speaker) or mirror")
    listeners: dict[str, int]


class ListedChannel(ChannelSummary):
    listeners: dict[str, int] = Field(description="live listeners by transport, summed over "
                                      "the workers that hold them")
    origin: str = Field(description="the worker the channel lives on")
    mirror_links: int = Field(description="other workers' links to it (one per mirror)")
    frames_sent: int
    workers: list[WorkerListeners]


class Census(Model):
    asked: int = Field(description="workers asked (this one included)")
    answered: int
    unreachable: list[str] = Field(description="workers that did not answer in time: their "
                                   "listeners are missing from the sums")
    partial: bool


class ChannelList(Model):
    channels: list[ListedChannel]
    workers: Census
