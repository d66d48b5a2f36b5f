"""The played audio as a pull source (bounded ring) or a push source (a callback per frame)."""

import asyncio

import numpy as np
import pytest

from gateway.media.opus_codec import FRAME_SAMPLES
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.pcm_source import PcmFrame, PcmSource, ReceivePathClosed
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from tests.opus_streams import SSRC, encode, packetize, run, speechy


def frame(i: int) -> PcmFrame:
    return PcmFrame(i, i * 0.02, FrameKind.FRAME, i, np.full(FRAME_SAMPLES, i, dtype=np.int16))


def test_ring_keeps_the_newest_frames_and_counts_what_it_drops():
    source = PcmSource(ring_frames=4)
    assert source.read() is None
    for i in range(6):
        source.push(frame(i))
    assert source.buffered == 4 and source.dropped == 2
    assert [source.read().index for _ in range(4)] == [2, 3, 4, 5]
    assert source.read() is None


def test_callbacks_see_every_frame_and_one_failing_stops_nothing():
    source = PcmSource(ring_frames=0)  # callbacks only
    seen: list[int] = []
    other: list[int] = []

    def broken(f: PcmFrame) -> None:
        raise ValueError("consumer bug")

    source.on_frame(broken)
    remove = source.on_frame(lambda f: seen.append(f.index))
    source.on_frame(lambda f: other.append(f.index))
    for i in range(3):
        source.push(frame(i))
    remove()
    source.push(frame(3))
    assert seen == [0, 1, 2] and other == [0, 1, 2, 3]
    assert source.callback_errors == 4 and source.buffered == 0


async def test_wait_and_async_iteration_end_when_closed():
    source = PcmSource()
    waiter = asyncio.ensure_future(source.wait())
    await asyncio.sleep(0)  # (let it block: nothing to read yet)
    source.push(frame(0))
    assert (await asyncio.wait_for(waiter, 1.0)).index == 0
    source.push(frame(1))
    source.push(frame(2))
    source.close()
    assert [f.index async for f in source] == [1, 2]  # drained, then the end
    with pytest.raises(ReceivePathClosed):
        await source.wait()
    source.push(frame(3))  # after the end: ignored
    assert source.buffered == 0


async def test_wait_needs_the_ring():
    with pytest.raises(RuntimeError):
        await PcmSource(ring_frames=0).wait()


def test_receive_path_hands_out_each_played_period():
    packets = packetize(encode(speechy(0.6), 20), 20)
    path = ReceivePath(ReceivePathConfig(nack=False, record_s=1.0, pcm_ring_frames=4))
    pushed: list[PcmFrame] = []
    path.pcm.on_frame(pushed.append)
    pulled: list[PcmFrame] = []
    pending = list(packets)
    for k in range(40):  # a consumer that reads every period: sees all, the ring drops none
        now = 0.015 + k * 0.02
        while pending and pending[0].at <= now:
            p = pending.pop(0)
            path.on_packet(p.seq, p.ts, p.payload, SSRC, p.at)
        path.tick(now)
        pulled.append(path.pcm.read())
    assert path.pcm.dropped == 0 and path.stats.pcm_dropped == 0
    assert [f.index for f in pulled] == [f.index for f in pushed] == list(range(40))
    recording = path.played_pcm()
    assert np.array_equal(np.concatenate([f.pcm for f in pulled]), recording)
    assert all(f.pcm.size == FRAME_SAMPLES and f.pcm.dtype == np.int16 for f in pulled)
    assert not pulled[10].pcm.flags.writeable  # shared with the recording: read-only
    assert {f.kind for f in pulled} == {FrameKind.UNDERRUN, FrameKind.FRAME}
    assert [f.seq for f in pulled if f.kind is FrameKind.FRAME] == [p.seq for p in packets]


def test_a_consumer_that_falls_behind_loses_the_oldest_frames():
    packets = packetize(encode(speechy(0.6), 20), 20)
    path = ReceivePath(ReceivePathConfig(nack=False, pcm_ring_frames=4))
    run(path, packets, 30)
    assert path.pcm.buffered == 4 and path.stats.pcm_dropped == 26
    assert [path.pcm.read().index for _ in range(4)] == [26, 27, 28, 29]


async def test_close_ends_the_source():
    path = ReceivePath(ReceivePathConfig(nack=False))
    reader = asyncio.ensure_future(path.pcm.wait())
    await asyncio.sleep(0)
    await path.close()
    with pytest.raises(ReceivePathClosed):
        await asyncio.wait_for(reader, 1.0)
