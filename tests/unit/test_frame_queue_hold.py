"""A held queue looks empty to its consumer (pops nothing, ``len`` 0, ``wait_ready`` waits) and
keeps its frames; the producer still fills it up to its bound; ``release`` plays on from the
same frame and wakes a waiting consumer."""

import asyncio

from gateway.media.frame_queue import FrameQueue
from gateway.media.frames import EncodedFrame


async def test_hold_keeps_the_frames_and_release_plays_on():
    q = FrameQueue(maxsize=4, low_water=1)
    for i in range(2):
        await q.put(EncodedFrame(bytes([i])))
    assert q.pop().payload == b"\x00"
    woken: list[int] = []
    q.on_wake = lambda: woken.append(len(q))
    q.hold()
    assert q.held and len(q) == 0 and q.queued == 1
    assert q.pop() is None and q.pop_fields() is None and q.pop_run(5) is None
    for i in range(2, 5):
        await q.put(EncodedFrame(bytes([i])))  # room for 3 more: the producer does not wait
    assert q.queued == 4 and woken == []  # no wake-up while held
    blocked = asyncio.create_task(q.put(EncodedFrame(b"\x05")))
    await asyncio.sleep(0)
    assert not blocked.done()  # full: the bound holds while held
    reader = asyncio.create_task(q.wait_ready())
    await asyncio.sleep(0)
    assert not reader.done()
    q.release()
    await asyncio.wait_for(reader, 1)
    assert woken == [4]
    assert [q.pop().payload for _ in range(3)] == [b"\x01", b"\x02", b"\x03"]
    await asyncio.wait_for(blocked, 1)
    assert [q.pop().payload for _ in range(2)] == [b"\x04", b"\x05"]


async def test_clear_while_held_empties_it():
    q = FrameQueue(maxsize=4)
    await q.put(EncodedFrame(b"a"))
    q.hold()
    assert [f.payload for f in q.clear()] == [b"a"]
    q.release()
    assert q.pop() is None
