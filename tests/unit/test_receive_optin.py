"""Nothing of what is played or received is kept unless asked for, and it is bounded then."""

import asyncio

import pytest

from gateway.client.capture import DEFAULT_MAX_PACKETS, RtpCapture
from gateway.client.peer import GatewayClient
from gateway.media.opus_codec import FRAME_SAMPLES
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from tests.opus_streams import encode, packetize, run, speechy

PACKETS = packetize(encode(speechy(1.0), 20), 20)


def test_by_default_nothing_is_recorded_or_logged():
    config = ReceivePathConfig()
    assert (config.record_s, config.log_periods, config.record_periods) == (0, 0, 0)
    path = ReceivePath(ReceivePathConfig(nack=False))
    run(path, PACKETS, 100)
    assert path.periods == 100 and path._recording == [] and path._log is None
    with pytest.raises(RuntimeError, match="recording is off"):
        path.played_pcm()
    with pytest.raises(RuntimeError, match="period log is off"):
        path.played  # noqa: B018
    assert path.stats.unrecorded_periods == 0


def test_recording_and_log_are_bounded_when_on():
    path = ReceivePath(ReceivePathConfig(nack=False, record_s=0.1, log_periods=3))
    run(path, PACKETS, 20)
    assert path.played_pcm().size == 5 * FRAME_SAMPLES  # 100 ms
    assert path.stats.unrecorded_periods == 15
    assert [p.index for p in path.played] == [17, 18, 19]


def test_negative_bounds_are_refused():
    for field in ("record_s", "log_periods", "pcm_ring_frames"):
        with pytest.raises(ValueError):
            ReceivePathConfig(**{field: -1})


class Packet:
    def __init__(self, seq: int) -> None:
        self.sequence_number, self.timestamp, self.payload = seq, seq * 960, b"x"
        self.payload_type, self.ssrc = 111, 1


async def test_the_rtp_capture_counts_but_keeps_packets_only_when_asked():
    capture = RtpCapture()
    waiter = asyncio.ensure_future(capture.wait_for_seq(65535))
    for seq in (65534, 65535, 0):
        capture.on_packet(Packet(seq), 0)
    await asyncio.wait_for(waiter, 1.0)
    await asyncio.wait_for(capture.wait_packets(3), 1.0)
    assert capture.count == 3 and not capture.keeps_packets and capture.dropped == 0
    for needs_packets in (lambda: capture.packets, capture.ordered, capture.missing):
        with pytest.raises(RuntimeError, match="keeps no packets"):
            needs_packets()
    bounded = RtpCapture(max_packets=2)
    for seq in range(5):
        bounded.on_packet(Packet(seq), 0)
    assert [p.seq for p in bounded.packets] == [0, 1] and bounded.dropped == 3


async def test_the_client_keeps_nothing_unless_asked():
    plain = GatewayClient("http://127.0.0.1:9", receive_path=True)
    kept = GatewayClient("http://127.0.0.1:9", capture=True)
    few = GatewayClient("http://127.0.0.1:9", capture=100)
    try:
        assert plain.capture.max_packets == 0
        assert plain.receive is not None and plain.receive.config == ReceivePathConfig()
        assert kept.capture.max_packets == DEFAULT_MAX_PACKETS
        assert few.capture.max_packets == 100 and few.receive is None
    finally:
        for client in (plain, kept, few):
            await client.close(delete=False)
