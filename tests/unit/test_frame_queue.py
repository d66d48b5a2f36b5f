import asyncio

import pytest

from gateway.media.frame_queue import FrameQueue
from gateway.media.frames import EncodedFrame


async def test_put_blocks_when_full_and_resumes_on_pop():
    q = FrameQueue(maxsize=3, low_water=2)
    for i in range(3):
        await q.put(EncodedFrame(bytes([i])))
    blocked = asyncio.create_task(q.put(EncodedFrame(b"\x03")))
    await asyncio.sleep(0)
    assert not blocked.done() and len(q) == 3
    assert q.pop().payload == b"\x00"
    await asyncio.wait_for(blocked, 1)
    assert [q.pop().payload for _ in range(3)] == [b"\x01", b"\x02", b"\x03"]
    assert q.pop() is None and q.high_water == 3


async def test_clear_empties_and_unblocks_producers():
    q = FrameQueue(maxsize=1)
    await q.put(EncodedFrame(b"a"))
    blocked = asyncio.create_task(q.put(EncodedFrame(b"b")))
    await asyncio.sleep(0)
    dropped = q.clear()
    assert [f.payload for f in dropped] == [b"a"]
    await asyncio.wait_for(blocked, 1)
    assert q.pop().payload == b"b"


def test_bound_must_be_positive():
    with pytest.raises(ValueError):
        FrameQueue(0)


async def test_a_blocked_producer_wakes_only_at_low_water():
    q = FrameQueue(maxsize=10)  # low water: 5
    for i in range(10):
        await q.put(EncodedFrame(bytes([i])))
    blocked = asyncio.create_task(q.put(EncodedFrame(b"x")))
    await asyncio.sleep(0)
    for _ in range(4):  # 9, 8, 7, 6 left: still above low water
        q.pop()
        await asyncio.sleep(0)
        assert not blocked.done()
    q.pop()  # 5 left: low water reached
    await asyncio.wait_for(blocked, 1)
    assert len(q) == 6 and q.producer_waits == 1 and q.high_water == 10


def test_low_water_must_be_below_the_bound():
    with pytest.raises(ValueError):
        FrameQueue(4, low_water=4)


async def test_queued_frames_are_not_gc_tracked_objects():
    import gc

    class Owner:
        def on_frame_sent(self, index, seq, timestamp, at):
            pass

    owner = Owner()
    q = FrameQueue(maxsize=500)
    gc.disable()
    try:
        before = len(gc.get_objects())
        for i in range(500):
            await q.put(EncodedFrame(bytes([i & 0xFF]) * 40, owner, i))
        assert len(gc.get_objects()) - before < 20  # deque blocks only, nothing per frame
    finally:
        gc.enable()
    frame = q.pop()
    assert frame.owner is owner and frame.index == 0 and len(q) == 499
    dropped = q.clear()
    assert [f.index for f in dropped] == list(range(1, 500)) and len(q) == 0


async def test_extend_queues_a_run_of_frames_as_room_allows():
    q = FrameQueue(maxsize=4, low_water=1)
    owner = object()
    producer = asyncio.create_task(q.extend([bytes([i]) for i in range(10)], owner, 5))
    await asyncio.sleep(0)
    assert len(q) == 4 and not producer.done()  # filled to the bound, then waits
    popped = [q.pop() for _ in range(3)]  # down to low water: room again
    await asyncio.sleep(0)
    assert [f.index for f in popped] == [5, 6, 7] and all(f.owner is owner for f in popped)
    while not producer.done():
        q.pop()
        await asyncio.sleep(0)
    assert q.high_water == 4 and q.producer_waits >= 2


async def test_extend_from_an_offset_copies_nothing_and_numbers_from_first_index():
    queue = FrameQueue(10)
    frames = (b"a", b"b", b"c", b"d")
    await queue.extend(frames, None, first_index=1, start=1)
    assert [queue.pop_fields() for _ in range(3)] == [(b"b", None, 1), (b"c", None, 2),
                                                       (b"d", None, 3)]
    assert queue.offer(frames, None, first_index=2, start=2) == 2
    assert queue.pop_fields() == (b"c", None, 2)


async def test_pop_run_takes_one_owners_frames_up_to_the_limit_and_frees_room():
    a, b = object(), object()
    q = FrameQueue(maxsize=6, low_water=2)
    q.offer([b"a0", b"a1", b"a2"], a, 10)  # type: ignore[arg-type]
    q.offer([b"b0", b"b1"], b, 0)  # type: ignore[arg-type]
    assert q.pop_run(2) == ([b"a0", b"a1"], a, 10)  # the limit
    assert q.pop_run(5) == ([b"a2"], a, 12)  # the run ends where the owner changes
    assert q.pop_run(0) is None and len(q) == 2
    blocked = asyncio.create_task(q.extend([b"c"] * 6, None))
    await asyncio.sleep(0)
    assert not blocked.done()  # full
    assert q.pop_run(9) == ([b"b0", b"b1"], b, 0)
    q.pop_run(2)  # down to the low-water mark: the producer is let in
    await asyncio.wait_for(blocked, 1)
    assert q.pop_run(9) == ([b"c"] * 4, None, 2) and q.pop_run(1) is None


async def test_when_space_calls_back_once_at_low_water_as_a_waiting_extend_wakes():
    q = FrameQueue(maxsize=4, low_water=1)
    calls: list[int] = []
    assert q.offer([b"a", b"b", b"c", b"d", b"e"], None) == 4  # full: "e" did not fit
    q.when_space(lambda: calls.append(len(q)))
    assert q.producer_waits == 1
    q.pop()
    q.pop()  # 2 left: above low water
    await asyncio.sleep(0)
    assert calls == []
    q.pop()  # 1 left: low water; called from the loop, not inside pop
    assert calls == []
    await asyncio.sleep(0)
    assert calls == [1]
    q.pop()
    await asyncio.sleep(0)
    assert calls == [1]  # once


async def test_when_space_is_called_on_clear_and_not_after_cancel_space():
    q = FrameQueue(maxsize=2)
    calls: list[str] = []
    q.offer([b"a", b"b"], None)
    q.when_space(lambda: calls.append("cleared"))
    with pytest.raises(RuntimeError):  # one producer waits at a time
        q.when_space(lambda: calls.append("second"))
    q.clear()
    await asyncio.sleep(0)
    assert calls == ["cleared"]
    q.offer([b"a", b"b"], None)

    def cancelled() -> None:
        calls.append("cancelled")

    q.when_space(cancelled)
    q.cancel_space(lambda: None)  # not the one waiting: left alone
    q.cancel_space(cancelled)
    q.clear()
    await asyncio.sleep(0)
    assert calls == ["cleared"]
    q.when_space(lambda: calls.append("again"))  # free to wait again


def test_when_space_without_a_loop_calls_back_at_once():
    q = FrameQueue(maxsize=2, low_water=0)
    calls: list[int] = []
    q.offer([b"a", b"b"], None)
    q.when_space(lambda: calls.append(len(q)))
    q.pop_run(2)
    assert calls == [0]


async def test_sent_ahead_handing_back_returns_the_due_callback_instead_of_scheduling_it():
    """The compiled path's visit runs the producer's refill itself, before it feeds more."""
    q = FrameQueue(maxsize=4, low_water=1)
    calls: list[int] = []
    q.offer([b"a", b"b", b"c", b"d"], None)
    taken = q.pop_run(3)
    assert taken is not None
    q.ahead += 3  # fed ahead (webrtc/fed_frames.py)
    assert q.offer([b"e"], None) == 0
    q.when_space(lambda: calls.append(len(q)))
    assert q.sent_ahead(1, hand_back=True) is None  # 1 queued + 2 ahead: above low water
    refill = q.sent_ahead(2, hand_back=True)  # 1 queued + 0 ahead: low water
    assert refill is not None
    await asyncio.sleep(0)
    assert calls == []  # not scheduled: the caller's to run
    refill()
    assert calls == [1]
    assert q.sent_ahead(0, hand_back=True) is None  # once
    blocked = asyncio.create_task(q.extend([b"f"] * 4, None))  # a task producer: woken as ever
    await asyncio.sleep(0)
    assert not blocked.done()
    q.pop_run(4)  # "d" (its own run)
    q.pop_run(4)  # the three "f": low water
    await asyncio.wait_for(blocked, 1)
