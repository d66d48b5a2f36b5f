"""The NACK generator re-asks RTT-aware (1.5 RTT after the last request), is bounded per packet
and per second (no storms whatever the loss), and stops asking for what RED rebuilt."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import deque

import pytest

from gateway.nack.generator import NackGenerator
from gateway.nack.rtcp import parse_nack_packet
from gateway.nack.sender import NackSender
from gateway.rtp.seqnum import seq_add


def test_retries_come_one_and_a_half_measured_round_trips_apart():
    gen = NackGenerator(rtt_s=0.1, min_interval_s=0.001, max_retries=4)
    gen.on_packet(1, 0.0)
    gen.on_packet(3, 0.0)
    assert gen.poll(0.0) == [2]
    assert gen.on_packet(2, 0.008) is True  # one request, one repair: an 8 ms round trip
    assert gen.rtt_s == pytest.approx(0.008)  # the first sample replaces the 100 ms guess
    assert gen.retry_interval_s == pytest.approx(0.012)
    gen.on_packet(6, 0.010)
    assert gen.poll(0.010) == [4, 5]
    assert gen.next_due(0.010) == pytest.approx(0.022)
    assert gen.poll(0.021) == []
    assert gen.poll(0.022) == [4, 5]
    assert gen.stats.rtt_samples == 1


def test_rtt_samples_are_smoothed_and_bounded():
    gen = NackGenerator(rtt_s=0.05, max_rtt_s=0.5, min_interval_s=0.0, max_retries=1)
    gen.on_packet(0, 0.0)
    for k, rtt in enumerate([0.010, 0.018, 5.0]):
        base = 2 * k
        gen.on_packet(base + 2, float(k))
        assert gen.poll(float(k)) == [base + 1]
        gen.on_packet(base + 1, float(k) + rtt)
    assert gen.rtt_s == pytest.approx(0.010 + (0.018 - 0.010) / 8 + (0.5 - 0.011) / 8)
    assert gen.rtt_s < 0.5


def test_the_floor_holds_when_the_rtt_is_tiny():
    gen = NackGenerator(rtt_s=0.001, min_interval_s=0.02)
    gen.on_packet(1, 0.0)
    gen.on_packet(3, 0.0)
    assert gen.poll(0.0) == [2]
    assert gen.next_due(0.0) == pytest.approx(0.02)


def test_rebuilt_packets_are_no_longer_asked_for_and_give_no_rtt_sample():
    gen = NackGenerator(rtt_s=0.05)
    gen.on_packet(1, 0.0)
    gen.on_packet(5, 0.0)
    assert gen.on_recovered(2) is True  # before any request
    assert gen.poll(0.0) == [3, 4]
    assert gen.on_recovered(3) is True  # after one
    assert gen.on_recovered(3) is False
    assert gen.on_packet(3, 0.01) is False  # a late retransmission of it: nothing to repair
    assert gen.poll(1.0) == [4]
    s = gen.stats
    assert (s.cancelled, s.recovered, s.rtt_samples, s.rtt_ms) == (2, 0, 0, 50.0)
    assert NackGenerator().on_recovered(7) is False


def test_at_most_max_retries_per_packet():
    gen = NackGenerator(rtt_s=0.0, min_interval_s=0.01, max_retries=3, window_frames=1000)
    gen.on_packet(0, 0.0)
    gen.on_packet(2, 0.0)
    asked = [s for k in range(100) for s in gen.poll(k * 0.01)]
    assert asked == [1, 1, 1]
    assert gen.next_due(1.0) is None


def test_capped_requests_stay_due_oldest_first():
    gen = NackGenerator(max_seqs_per_s=100, burst_s=0.05, window_frames=50)  # 5 at once
    gen.on_packet(0, 0.0)
    gen.on_packet(9, 0.0)
    assert gen.poll(0.0) == [1, 2, 3, 4, 5]
    assert gen.stats.capped == 3
    assert gen.next_due(0.0) == pytest.approx(0.01)  # a token per 10 ms
    assert gen.poll(0.02) == [6, 7]
    assert gen.poll(0.05) == [8]


@pytest.mark.parametrize("loss", [0.5, 0.9, 1.0])
def test_no_storm_when_everything_is_lost_and_nacked(loss):
    """Every missing packet is NACKed, polled every 5 ms (more often than any receive path
    would): the per-second caps hold in every one-second window, and tracking stays bounded."""
    rate_nacks, rate_seqs, burst_s = 50.0, 200.0, 0.1
    gen = NackGenerator(rtt_s=0.0, min_interval_s=0.0, max_retries=10, window_frames=200,
                        max_nacks_per_s=rate_nacks, max_seqs_per_s=rate_seqs, burst_s=burst_s)
    rng = random.Random(5)
    packets: deque[tuple[float, int]] = deque()  # (time, seqs) of each NACK sent
    worst_packets = worst_seqs = 0
    seq = 60_000
    for step in range(20 * 200):  # 20 s in 5 ms steps; a packet every 20 ms
        now = step * 0.005
        if step % 4 == 0:
            seq = seq_add(seq, 1)
            if (loss < 1.0 and rng.random() >= loss) or step % 400 == 0:
                gen.on_packet(seq, now)  # (all lost: a packet per 2 s shows the gap)
        asked = gen.poll(now)
        if asked:
            packets.append((now, len(asked)))
        while packets and packets[0][0] <= now - 1.0:
            packets.popleft()
        worst_packets = max(worst_packets, len(packets))
        worst_seqs = max(worst_seqs, sum(n for _, n in packets))
        assert len(gen.missing) <= 200
    assert worst_packets <= rate_nacks * (1 + burst_s) + 1
    assert worst_seqs <= rate_seqs * (1 + burst_s) + 1
    assert gen.stats.capped > 0
    assert worst_seqs > 0.8 * rate_seqs  # the cap, not a lack of demand, bounded it


async def test_the_sender_retries_on_the_rtt_without_being_woken():
    sent: list[tuple[float, list[int]]] = []

    async def send_rtcp(data: bytes) -> bool:
        sent.append((time.monotonic(), parse_nack_packet(data).seqs))
        return True

    gen = NackGenerator(rtt_s=0.004, min_interval_s=0.001, max_retries=3)
    sender = NackSender(gen, send_rtcp, lambda: None)
    sender.media_ssrc = 0x1234
    sender.start()
    try:
        now = time.monotonic()
        gen.on_packet(10, now)
        gen.on_packet(12, now)
        sender.wake()  # the gap: the one wake; the retries come from next_due
        for _ in range(1000):  # (no event to wait on: the sender's own timer is under test)
            if len(sent) >= 3:
                break
            await asyncio.sleep(0.002)
    finally:
        await sender.close()
    assert [seqs for _, seqs in sent] == [[11], [11], [11]]
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(sent)]
    assert all(0.005 <= g < 0.2 for g in gaps), gaps  # 1.5 x 4 ms apart (loop timing allowing)
