"""How often a stream sent from C is visited while it replays a phrase (docs/density.md, "The
speaking premium").

A model, no network and no C: the gateway's own ``FrameQueue`` (50 frames), ``FrameFanout.feed``
(a phrase-cache replay's producer) and ``FedFrames`` against a fake C that sends one fed frame
a 20 ms slot and asks for the stream when its fed frames fall to ``sendpath.FED_LOW`` or run
out, as ``gw_run_parked`` does. A visit records what was sent and feeds more, as
``BatchStream.sent_from_c`` does; the producer's refill, when the room a visit made wakes it,
runs either in a loop callback of its own before the next slot (``FrameQueue.sent_ahead``'s
``call_soon``) or inside the visit before it feeds (``FrameQueue.sent_ahead`` with
``hand_back``). Prints the visits a replay costs for each ring size (``FED_SLOTS``) and each way.

    python -m bench.fed_visits [--frames 750] [--slots 24 32 48]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from gateway.media.fanout import FrameFanout, SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.nack.store import FrameStore
from gateway.net.sendpath import FED_LOW
from gateway.webrtc import fed_frames


class _Owner:
    """A delivery that only listens."""

    def on_frames_sent(self, index: int, count: int, seq: int, timestamp: int, at: float
                       ) -> None:
        pass

    def skip(self, count: int) -> None:
        pass

    def detach(self) -> None:
        pass


class _Source:
    def delivery(self, sink: str, first_index: int) -> _Owner:
        return _Owner()


class _LoopQueue(FrameQueue):
    """A queue whose ``when_space`` callbacks wait for the model's next slot (the loop)."""

    __slots__ = ("later",)

    def __init__(self, maxsize: int) -> None:
        super().__init__(maxsize)
        self.later: list[Callable[[], None]] = []

    def _wake(self, callback: Callable[[], None]) -> None:
        self.later.append(callback)


def visits(frames: int, slots: int, in_visit: bool, queue_frames: int = 50
           ) -> tuple[int, int, int]:
    """(visits, frames sent, refills run from the loop) for one replay of ``frames``."""
    fed_frames.FED_SLOTS = slots  # (the module's copy: what FedFrames.feed reads)
    queue = _LoopQueue(queue_frames)
    fanout = FrameFanout()
    fanout.attach("webrtc", queue, SinkPolicy.BLOCK)
    ended: list[Any] = []
    fanout.feed([bytes([k % 256]) * 80 for k in range(frames)], _Source(), 0, ended.append)
    fed = fed_frames.FedFrames()
    ring: list[bytes] = []  # the fake C's fed frames

    def feed_run(payloads: list[bytes], first: int, report: bool) -> tuple[int, None]:
        taken = min(len(payloads), slots - len(ring))
        ring.extend(payloads[:taken])
        return taken, None

    store = FrameStore()
    seq = sent = pending = count = from_loop = 0
    fed.feed(queue, feed_run)
    while ring or queue.queued or not ended:
        while queue.later:  # the loop's callbacks before the next slot
            queue.later.pop(0)()
            from_loop += 1
        if not ring:
            if not queue.queued and ended:
                break
            fed.feed(queue, feed_run)  # (a frame reaching an empty queue: on_wake)
            continue
        ring.pop(0)
        pending += 1
        sent += 1
        if len(ring) in (FED_LOW, 0):
            count += 1
            if in_visit:
                refill = queue.sent_ahead(pending, hand_back=True)
                fed.sent(pending, seq, 0.0, queue, store, None, False)
                if refill is not None:
                    refill()
            else:
                fed.sent(pending, seq, 0.0, queue, store, None)
            seq = (seq + pending) & 0xFFFF
            pending = 0
            fed.feed(queue, feed_run)
    return count, sent, from_loop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=750, help="the phrase (750: 15 s)")
    parser.add_argument("--slots", type=int, nargs="+", default=[16, 24, 32, 40, 48])
    args = parser.parse_args()
    saved = fed_frames.FED_SLOTS
    try:
        for slots in args.slots:
            for in_visit in (False, True):
                count, sent, from_loop = visits(args.frames, slots, in_visit)
                how = "in the visit" if in_visit else "from the loop"
                print(f"FED_SLOTS {slots:2d}, refill {how:13s}: {count:3d} visits for {sent} "
                      f"frames (one per {sent / count:.1f}); refills from the loop {from_loop}")
    finally:
        fed_frames.FED_SLOTS = saved


if __name__ == "__main__":
    main()
