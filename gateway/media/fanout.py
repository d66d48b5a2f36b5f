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

``feed`` is ``extend`` for a producer with no task (a phrase-cache replay, speech/speaker.py):
the same frames to the same sinks in the same order, but a full BLOCK sink's queue calls it
back when it has drained (``FrameQueue.when_space``) instead of a task waiting on it, and it
reports its end to a callback. A speaking session's replay then holds a ``FanoutFeed`` (a
hundred bytes) where a task waiting in ``extend`` held ≈ 2 KB (bench/session_memory.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    def feed(
        self, payloads: Sequence[bytes], source: FrameSource, first_index: int,
        on_end: Callable[[BaseException | None], None], start: int = 0,
    ) -> FanoutFeed:
        """``extend`` without a task: hand ``payloads[start:]`` to every sink attached now, as
        each BLOCK sink's queue has room; ``on_end(None)`` once all is handed (``on_end(error)``
        if that failed). Started at once: ``on_end`` may have been called on return.
        ``FanoutFeed.cancel`` stops it (``on_end`` is then not called)."""
        feed = FanoutFeed(tuple(self._ports.values()), payloads, source, first_index, start,
                          on_end)
        feed.run()
        return feed

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


_NO_PORTS: tuple[SinkPort, ...] = ()


class FanoutFeed:
    """One ``FrameFanout.feed``: the sinks it goes to (those attached when it began), which
    one it is at and how far; run again by that sink's queue when it has room."""

    __slots__ = ("_delivery", "_done", "_first_index", "_on_end", "_payloads", "_port",
                 "_ports", "_source", "_start", "_waiting")

    def __init__(
        self, ports: Sequence[SinkPort], payloads: Sequence[bytes], source: FrameSource,
        first_index: int, start: int, on_end: Callable[[BaseException | None], None],
    ) -> None:
        self._ports = ports
        self._port = 0  # the sink it is at
        self._payloads = payloads
        self._source = source
        self._first_index = first_index
        self._start = start
        self._on_end: Callable[[BaseException | None], None] | None = on_end
        self._delivery: SinkProgress | None = None  # the current BLOCK sink's, mid-way
        self._done = start  # payloads handed to the current BLOCK sink
        self._waiting: FrameQueue | None = None  # the queue that will call ``_resume``

    @property
    def ended(self) -> bool:
        """All handed, failed, or cancelled."""
        return self._on_end is None

    def cancel(self) -> None:
        """Stop: nothing more is handed and ``on_end`` is not called."""
        if self._waiting is not None:
            self._waiting.cancel_space(self._resume)
        self._finish()

    def run(self) -> None:
        """Hand on from where it stopped; on a full BLOCK sink, wait for its queue's call."""
        try:
            done = self._step()
        except Exception as exc:  # as a task's exception would end its producer
            self._end(exc)
            return
        if done:
            self._end(None)

    def _resume(self) -> None:
        self._waiting = None
        if self._on_end is not None:
            self.run()

    def _step(self) -> bool:
        """True once every sink has its frames; False when waiting for room."""
        ports, payloads, start = self._ports, self._payloads, self._start
        count = len(payloads) - start
        if count <= 0:
            return True
        while self._port < len(ports):
            port = ports[self._port]
            delivery = self._delivery
            if delivery is None:  # a new sink: as ``extend`` does for each
                delivery = self._source.delivery(port.name, self._first_index)
                port.frames_in += count
                if port.policy is not SinkPolicy.BLOCK:
                    taken = port.queue.offer(payloads, delivery, self._first_index, start)
                    if taken < count:
                        port.dropped += count - taken
                        delivery.skip(count - taken)
                    self._port += 1
                    continue
                self._delivery = delivery
                self._done = start
            queue = port.queue
            done = self._done
            done += queue.offer(payloads, delivery, self._first_index + done - start, done)
            self._done = done
            if done < len(payloads):
                self._waiting = queue
                queue.when_space(self._resume)
                return False
            self._delivery = None
            self._port += 1
        return True

    def _end(self, error: BaseException | None) -> None:
        on_end = self._on_end
        self._finish()
        if on_end is not None:
            on_end(error)

    def _finish(self) -> None:
        """Let go of everything (no reference kept to the sinks, the source, the caller)."""
        self._on_end = None
        self._waiting = None
        self._delivery = None
        self._ports = _NO_PORTS
        self._payloads = ()
        self._port = 0


def _owners(queue: FrameQueue) -> list[FrameOwner]:
    seen: dict[int, FrameOwner] = {}
    for frame in queue.clear():
        if frame.owner is not None:
            seen.setdefault(id(frame.owner), frame.owner)
    return list(seen.values())
