"""Frames made once, fanned out to any number of sinks.

A conversation's speaker produces each utterance's encoded frames once (synthesis or a phrase
cache replay) and hands them to a ``FrameFanout``. Every sink (the WebRTC leg's paced RTP stream,
an HTTP stream writer, ...) has its own bounded ``FrameQueue`` and one of two policies:

- ``BLOCK``: the producer waits for room (backpressure: synthesis runs at most a queue ahead of
  this sink's playout). The sink that plays the conversation is such a sink.
- ``DROP``: never slows the producer. Frames that find the queue full are dropped and counted
  (the sink's delivery is told how many it skipped), so a slow extra listener -- an HTTP reader
  that stops reading -- can never stall the others.

A sink does not consume other sinks' frames: each pops from its own queue. Progress and
completion are per sink: the producer's ``FrameSource`` (an utterance) hands each sink its own
``FrameOwner`` (a delivery), which the sink tells about every frame it sends; the source is done
when every delivery is. The fan-out knows nothing of RTP or HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from gateway.media.frame_queue import FrameQueue
from gateway.media.frames import FrameOwner


class SinkPolicy(StrEnum):
    BLOCK = "block"
    DROP = "drop"


class SinkProgress(FrameOwner, Protocol):
    """A source's progress at one sink."""

    def skip(self, count: int) -> None: ...

    def detach(self) -> None: ...


class FrameSource(Protocol):
    """What frames come from (an utterance): makes (or returns) its delivery to a sink."""

    def delivery(self, sink: str, first_index: int) -> SinkProgress: ...


@dataclass(eq=False)
class SinkPort:
    name: str
    queue: FrameQueue
    policy: SinkPolicy
    frames_in: int = 0  # frames handed to this sink
    dropped: int = 0  # DROP policy: frames that found the queue full


class FrameFanout:
    """The speaker's one output: ``extend`` hands consecutive frames of one source to every
    attached sink, waiting (BLOCK) or dropping (DROP) by each sink's policy."""

    def __init__(self) -> None:
        self._ports: dict[str, SinkPort] = {}

    def attach(self, name: str, queue: FrameQueue, policy: SinkPolicy) -> SinkPort:
        if name in self._ports:
            raise ValueError(f"a sink named {name!r} is already attached")
        port = SinkPort(name, queue, policy)
        self._ports[name] = port
        return port

    def detach(self, name: str) -> list[FrameOwner]:
        """Remove a sink; its queued frames are dropped and their deliveries detached (a source
        does not wait for a sink that is gone). Returns those owners."""
        port = self._ports.pop(name, None)
        if port is None:
            return []
        owners = _owners(port.queue)
        for owner in owners:
            detach = getattr(owner, "detach", None)
            if detach is not None:
                detach()
        return owners

    @property
    def ports(self) -> list[SinkPort]:
        return list(self._ports.values())

    def __len__(self) -> int:
        return len(self._ports)

    async def extend(
        self, payloads: Sequence[bytes], source: FrameSource, first_index: int = 0,
        start: int = 0,
    ) -> None:
        """Hand ``payloads[start:]``, frames ``first_index ..`` of ``source``, to every sink
        attached now."""
        count = len(payloads) - start
        if count <= 0:
            return
        for port in list(self._ports.values()):
            delivery = source.delivery(port.name, first_index)
            port.frames_in += count
            if port.policy is SinkPolicy.BLOCK:
                await port.queue.extend(payloads, delivery, first_index, start)
            else:
                taken = port.queue.offer(payloads, delivery, first_index, start)
                if taken < count:
                    port.dropped += count - taken
                    delivery.skip(count - taken)

    def hold(self, held: bool) -> None:
        """Pause (True) or resume (False) every sink's playout, frames kept (FrameQueue.hold)."""
        for port in self._ports.values():
            if held:
                port.queue.hold()
            else:
                port.queue.release()

    def clear(self) -> list[FrameOwner]:
        """Drop every sink's queued frames at once (barge-in); returns their distinct owners."""
        owners: list[FrameOwner] = []
        for port in self._ports.values():
            owners.extend(_owners(port.queue))
        return owners


def _owners(queue: FrameQueue) -> list[FrameOwner]:
    seen: dict[int, FrameOwner] = {}
    for frame in queue.clear():
        if frame.owner is not None:
            seen.setdefault(id(frame.owner), frame.owner)
    return list(seen.values())
