"""``FedFrames``: what a stream sent from C was fed ahead, recorded once C sent it, or queued
again at the front in order when taken back (webrtc/fed_frames.py)."""

from __future__ import annotations

from typing import Any

from gateway.media.frame_queue import FrameQueue
from gateway.nack.store import FrameStore
from gateway.net.sendpath import FED_SLOTS
from gateway.webrtc.fed_frames import FedFrames


class Owner:
    cancelled = False

    def __init__(self, fail: bool = False) -> None:
        self.told: list[tuple[int, int, int]] = []
        self.fail = fail

    def on_frame_sent(self, index: int, seq: int, timestamp: int, at: float) -> None:
        raise AssertionError("told once a run, not a frame")

    def on_frames_sent(self, index: int, count: int, seq: int, timestamp: int, at: float) -> None:
        self.told.append((index, count, seq))
        if self.fail:
            raise RuntimeError("owner failed")


class FakeC:
    """``CompiledBatch.feed_run`` bound to a stream: takes up to ``room`` frames."""

    def __init__(self, room: int = FED_SLOTS, longest: int = 1275) -> None:
        self.fed: list[tuple[bytes, int, bool]] = []
        self.room, self.longest = room, longest

    def __call__(self, payloads: list[bytes], first: int, report: bool) -> tuple[int, Any]:
        taken = 0
        for k, payload in enumerate(payloads):
            if len(self.fed) >= self.room or len(payload) > self.longest:
                break
            self.fed.append((payload, first + k, report and k == 0))
            taken += 1
        return taken, object()


def queued(queue: FrameQueue) -> list[tuple[bytes, object, int]]:
    out = []
    while (fields := queue.pop_fields()) is not None:
        out.append(fields)
    return out


def test_feeds_runs_up_to_the_ring_and_reports_each_new_owners_first_frame():
    a, b = Owner(), Owner()
    queue = FrameQueue(FED_SLOTS + 26)
    queue.offer([b"a%d" % k for k in range(5)], a, 0)
    queue.offer([b"b%d" % k for k in range(FED_SLOTS + 15)], b, 3)
    fed, c = FedFrames(), FakeC()
    assert fed.feed(queue, c)
    assert fed.count == FED_SLOTS and len(c.fed) == FED_SLOTS
    assert [(p, i, r) for p, i, r in c.fed[:6]] == [
        (b"a0", 0, True), (b"a1", 1, False), (b"a2", 2, False), (b"a3", 3, False),
        (b"a4", 4, False), (b"b0", 3, True)]
    assert len(queue) == 20
    # the same owner's next run is not reported again
    c.fed.clear()
    fed.sent(FED_SLOTS, 100, 1.0, queue, FrameStore())
    assert fed.feed(queue, c) and c.fed[0][2] is False


def test_sent_records_refs_and_tells_each_owner_once_a_run():
    a, b = Owner(), Owner()
    queue = FrameQueue(50)
    queue.offer([b"a%d" % k for k in range(3)], a, 7)
    queue.offer([b"bb%d" % k for k in range(4)], b, 0)
    fed, store = FedFrames(), FrameStore()
    fed.feed(queue, FakeC())
    octets, error = fed.sent(5, 65534, 2.0, queue, store)  # across the seq wrap
    assert error is None and octets == 3 * 2 + 2 * 3
    assert a.told == [(7, 3, 65534)] and b.told == [(0, 2, 1)]
    assert store._refs[(65534 & 255) * 2] == b"a0" and store._refs[1 * 2] == b"bb0"
    assert store._refs[1 * 2 + 1] is b
    assert fed.count == 2
    fed.sent(2, 3, 2.1, queue, store)
    assert b.told[-1] == (2, 2, 3) and fed.count == 0 and not fed.runs


def test_an_owners_failure_is_returned_and_the_rest_recorded():
    bad, good = Owner(fail=True), Owner()
    queue = FrameQueue(50)
    queue.offer([b"x", b"y"], bad, 0)
    queue.offer([b"z"], good, 0)
    fed, store = FedFrames(), FrameStore()
    fed.feed(queue, FakeC())
    octets, error = fed.sent(3, 10, 1.0, queue, store)
    assert isinstance(error, RuntimeError) and octets == 3
    assert good.told == [(0, 1, 12)] and store._refs[12 * 2] == b"z"


def test_take_back_queues_what_was_not_sent_in_order_at_the_front():
    a, b = Owner(), Owner()
    queue = FrameQueue(FED_SLOTS + 26)
    queue.offer([b"a%d" % k for k in range(4)], a, 0)
    queue.offer([b"b%d" % k for k in range(FED_SLOTS + 6)], b, 0)
    fed = FedFrames()
    fed.feed(queue, FakeC())
    fed.sent(2, 0, 1.0, queue, FrameStore())  # a0, a1 sent
    assert fed.take_back(queue) == FED_SLOTS - 2 and fed.count == 0
    expected = [(b"a%d" % k, a, k) for k in range(2, 4)] + [
        (b"b%d" % k, b, k) for k in range(FED_SLOTS + 6)]
    assert queued(queue) == expected


def test_a_frame_c_does_not_take_goes_back_to_the_front():
    a = Owner()
    queue = FrameQueue(50)
    queue.offer([b"ok", b"x" * 2000, b"after"], a, 0)
    fed, c = FedFrames(), FakeC()
    assert not fed.feed(queue, c)
    assert fed.count == 1 and [p for p, _, _ in c.fed] == [b"ok"]
    assert queued(queue) == [(b"x" * 2000, a, 1), (b"after", a, 2)]


def test_frames_fed_ahead_count_against_the_queues_bound():
    """Synthesis stays at most ``maxsize`` frames ahead of what went out: frames fed to C
    still count (``FrameQueue.ahead``) until sent or taken back."""
    a = Owner()
    size = FED_SLOTS + 4
    queue = FrameQueue(size, low_water=size // 2)
    assert queue.offer([b"x"] * (size + 10), a, 0) == size
    fed = FedFrames()
    fed.feed(queue, FakeC())
    assert len(queue) == 4 and queue.ahead == FED_SLOTS
    assert queue.offer([b"y"], a, size) == 0  # full: queued + ahead
    woken: list[int] = []
    queue.when_space(lambda: woken.append(1))
    fed.sent(5, 0, 1.0, queue, FrameStore())
    assert not woken  # 4 queued + FED_SLOTS - 5 ahead: above low water
    fed.sent(FED_SLOTS - 1 - size // 2, 5, 1.1, queue, FrameStore())
    assert woken == [1]  # queued + ahead = low water: the producer's turn
    back = size // 2 - 4  # fed, not sent
    assert fed.take_back(queue) == back and queue.ahead == 0 and len(queue) == size // 2


def test_feeding_wakes_no_producer_sending_does():
    """Frames popped to be fed count against the bound as they are popped: the feed makes no
    room (a producer woken there was a refill outside the visit, a loop callback of its own);
    their sending does (``sent``; in a visit, ``FrameQueue.sent_ahead(..., hand_back=True)``)."""
    a = Owner()
    size = FED_SLOTS + 4
    queue = FrameQueue(size, low_water=size - 2)
    assert queue.offer([b"x"] * size, a, 0) == size
    woken: list[int] = []
    queue.when_space(lambda: woken.append(1))  # (no loop: called at once when due)
    fed = FedFrames()
    assert fed.feed(queue, FakeC())
    assert queue.ahead == FED_SLOTS and len(queue) == 4 and not woken
    fed.sent(2, 0, 1.0, queue, FrameStore())
    assert woken == [1]


def test_a_frame_c_does_not_take_is_not_counted_ahead():
    a = Owner()
    queue = FrameQueue(50)
    queue.offer([b"ok", b"x" * 2000, b"after"], a, 0)
    fed = FedFrames()
    assert not fed.feed(queue, FakeC())
    assert queue.ahead == 1 and len(queue) == 2
