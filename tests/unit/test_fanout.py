"""Frames made once reach every sink; each sink has its own buffer, policy and progress."""

import asyncio

from gateway.media.fanout import FrameFanout, SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.speech.utterance import Utterance, UtteranceState


def drain(queue: FrameQueue, at: float = 0.0) -> list[bytes]:
    out = []
    while (fields := queue.pop_fields()) is not None:
        payload, owner, index = fields
        owner.on_frame_sent(index, index, index * 960, at)
        out.append(payload)
    return out


async def test_every_sink_gets_the_same_frames_and_the_utterance_waits_for_all():
    fanout = FrameFanout()
    rtp, http = FrameQueue(10), FrameQueue(10)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    fanout.attach("http", http, SinkPolicy.BLOCK)
    u = Utterance("hi", "tone")
    u.state = UtteranceState.SYNTHESIZING
    frames = [bytes([i]) for i in range(5)]
    await fanout.extend(frames, u)
    u.all_queued(5)
    assert drain(rtp) == frames  # reading one sink takes nothing from the other
    assert u.state is UtteranceState.PLAYING  # the first frame out anywhere: playing
    assert drain(http) == frames
    assert u.state is UtteranceState.DONE
    assert u.deliveries["rtp"].frames == u.deliveries["http"].frames == 5
    assert u.frames_sent == 5 and u.as_json()["sinks"]["http"]["frames_sent"] == 5


async def test_a_full_drop_sink_never_stalls_the_producer():
    fanout = FrameFanout()
    rtp, slow = FrameQueue(100), FrameQueue(4)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    port = fanout.attach("slow", slow, SinkPolicy.DROP)
    u = Utterance("hi", "tone")
    frames = [bytes([i]) for i in range(20)]
    await asyncio.wait_for(fanout.extend(frames, u), 1)  # nobody reads "slow"
    u.all_queued(20)
    assert len(slow) == 4 and port.dropped == 16 and u.deliveries["slow"].skipped == 16
    drain(rtp)
    assert u.state is not UtteranceState.DONE  # "slow" still has 4 frames to send
    drain(slow)
    assert u.state is UtteranceState.DONE


async def test_a_blocking_sink_is_backpressure():
    fanout = FrameFanout()
    queue = FrameQueue(4, low_water=1)
    fanout.attach("rtp", queue, SinkPolicy.BLOCK)
    u = Utterance("hi", "tone")
    producer = asyncio.create_task(fanout.extend([b"x"] * 10, u))
    await asyncio.sleep(0)
    assert len(queue) == 4 and not producer.done()
    got = 0
    while not producer.done():
        got += len(drain(queue))
        await asyncio.sleep(0)  # one loop turn for the producer, not a timed wait
    got += len(drain(queue))
    assert got == 10 and u.deliveries["rtp"].frames == 10


async def test_detaching_a_sink_releases_the_utterance_and_clear_returns_owners():
    fanout = FrameFanout()
    rtp, http = FrameQueue(10), FrameQueue(10)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    fanout.attach("http", http, SinkPolicy.BLOCK)
    u = Utterance("hi", "tone")
    await fanout.extend([b"a", b"b"], u)
    u.all_queued(2)
    drain(rtp)
    fanout.detach("http")  # the HTTP reader went away
    assert u.state is UtteranceState.DONE and len(fanout) == 1
    v = Utterance("again", "tone")
    await fanout.extend([b"c"], v)
    owners = fanout.clear()
    assert [o.utterance for o in owners] == [v] and len(rtp) == 0


async def test_a_sink_attached_mid_utterance_waits_only_for_its_frames():
    fanout = FrameFanout()
    rtp = FrameQueue(10)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    u = Utterance("hi", "tone")
    await fanout.extend([b"a", b"b"], u)
    late = FrameQueue(10)
    fanout.attach("late", late, SinkPolicy.BLOCK)
    await fanout.extend([b"c"], u, first_index=2)
    u.all_queued(3)
    drain(rtp)
    assert drain(late) == [b"c"]
    assert u.deliveries["late"].first_index == 2 and u.state is UtteranceState.DONE


async def test_queue_wait_ready_wakes_a_pull_consumer():
    queue = FrameQueue(4)
    waiter = asyncio.create_task(queue.wait_ready())
    await asyncio.sleep(0)
    assert not waiter.done()
    assert queue.offer([b"x"], None) == 1
    await asyncio.wait_for(waiter, 1)
    assert queue.offer([b"y"] * 5, None) == 3  # offer never waits: takes what fits


async def test_a_feed_hands_frames_as_extend_does_without_a_task():
    """``feed``: the same frames to every sink, a full BLOCK sink resuming it as it drains
    (no task waits), DROP sinks taking what fits, ``on_end`` once all is handed."""
    fanout = FrameFanout()
    rtp, slow = FrameQueue(4, low_water=1), FrameQueue(3)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    drop = fanout.attach("slow", slow, SinkPolicy.DROP)
    u = Utterance("hi", "tone")
    ended: list[BaseException | None] = []
    frames = [bytes([i]) for i in range(10)]
    tasks = len(asyncio.all_tasks())
    feed = fanout.feed(frames, u, 1, ended.append, start=1)  # frames 1..9, as a replay's rest
    assert len(rtp) == 4 and len(slow) == 0 and not feed.ended  # rtp full: waiting for room
    assert len(asyncio.all_tasks()) == tasks
    got: list[bytes] = []
    while not ended:
        got += drain(rtp)
        await asyncio.sleep(0)
    got += drain(rtp)
    assert got == frames[1:] and ended == [None] and feed.ended
    assert u.deliveries["rtp"].first_index == 1 and u.deliveries["rtp"].frames == 9
    assert len(slow) == 3 and drop.dropped == 6 and u.deliveries["slow"].skipped == 6
    assert rtp.producer_waits >= 2 and rtp._on_space is None


async def test_a_cancelled_feed_hands_nothing_more_and_is_not_called_back():
    fanout = FrameFanout()
    rtp = FrameQueue(4, low_water=1)
    fanout.attach("rtp", rtp, SinkPolicy.BLOCK)
    ended: list[BaseException | None] = []
    feed = fanout.feed([b"x"] * 10, Utterance("hi", "tone"), 0, ended.append)
    feed.cancel()
    assert feed.ended and rtp._on_space is None  # the queue lets go of it
    drain(rtp)
    await asyncio.sleep(0)
    assert ended == [] and len(rtp) == 0


async def test_a_feed_that_fails_reports_the_error():
    class Broken:
        def delivery(self, sink: str, first_index: int):
            raise RuntimeError("boom")

    fanout = FrameFanout()
    fanout.attach("rtp", FrameQueue(4), SinkPolicy.BLOCK)
    ended: list[BaseException | None] = []
    feed = fanout.feed([b"x"], Broken(), 0, ended.append)  # type: ignore[arg-type]
    assert feed.ended and len(ended) == 1 and "boom" in repr(ended[0])
