"""A channel listener's lag policy and the HTTP listener's writes, without sockets
(gateway/channels/listener.py, http_listener.py, air.py)."""

from __future__ import annotations

import asyncio

from gateway.channels.http_listener import HttpListener
from gateway.channels.listener import LagPolicy, Listener
from gateway.http.formatters import FrameFormatter


class Plain(FrameFormatter):
    def start(self) -> bytes:
        return b"<"

    def frame(self, payload: bytes) -> bytes:
        return payload

    def end(self) -> bytes:
        return b">"


def test_a_full_queue_drops_then_closes_as_too_slow():
    listener = Listener(LagPolicy(queue_frames=3, drop_after=4))
    closed = []
    listener.on_closed = closed.append
    for i in range(3):
        listener.offer(b"x", i)
    assert (listener.dropped, listener.behind) == (0, 0)
    for i in range(3, 6):
        listener.offer(b"x", i)
    assert (listener.dropped, listener.behind) == (3, 3)
    listener.queue.pop()  # it read one: no longer behind, the gap stays counted
    listener.offer(b"x", 6)
    assert (listener.dropped, listener.behind) == (3, 0)
    for i in range(7, 11):
        listener.offer(b"x", i)
    assert listener.close_reason is not None and listener.close_reason.startswith("too_slow")
    assert closed == [listener] and len(listener.queue) == 0
    listener.offer(b"x", 11)  # closed: nothing more is taken
    assert listener.frames_in == 11


def test_a_late_joiner_records_where_it_started():
    listener = Listener(LagPolicy())
    listener.offer(b"a", 1234)
    assert listener.first_air_index == 1234


async def test_http_writes_stay_in_order_when_the_reader_is_slow():
    listener = HttpListener(Plain(), LagPolicy(queue_frames=50, drop_after=50), write_frames=1)
    written: list[bytes] = []
    accept_now = True
    gate = asyncio.Event()

    async def write(data: bytes) -> None:  # the task's write: waits for the "reader"
        await gate.wait()
        written.append(data)

    def write_now(data: bytes) -> bool:
        if accept_now:
            written.append(data)
        return accept_now

    gate.set()
    task = asyncio.ensure_future(listener.run(write, write_now, lambda: None))
    await asyncio.sleep(0)
    tick = 0

    def air(payload: bytes) -> None:
        nonlocal tick
        listener.offer(payload, tick)
        listener.after_tick(tick)
        tick += 1

    air(b"1")
    air(b"2")
    gate.clear()
    accept_now = False  # the socket is full: the next chunk goes to the task, which waits
    air(b"3")
    air(b"4")  # must not overtake "3"
    accept_now = True
    air(b"5")
    await asyncio.sleep(0)
    gate.set()
    for _ in range(5):
        await asyncio.sleep(0)
    air(b"6")
    for _ in range(5):
        await asyncio.sleep(0)
    listener.close_soon("done")
    await asyncio.wait_for(task, 1)
    body = b"".join(written)
    assert body[0:1] == b"<" and body.endswith(b">")
    assert body[1:-1] == b"123456"
