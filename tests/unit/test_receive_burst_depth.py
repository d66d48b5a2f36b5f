"""The burst floor: with NACK on, the jitter buffer learns from the gaps it sees how long this
stream's loss bursts run and holds enough for their repairs, deepening in a pause."""

from __future__ import annotations

import heapq
import itertools
import math

import numpy as np
import pytest

from gateway.nack.generator import NackGenerator
from gateway.receive.burst_depth import BurstDepth
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.loss_tracker import LossTracker
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from tests.opus_streams import FRAME, SSRC, encode, packetize, quiet, speechy


def test_no_burst_no_floor():
    depth = BurstDepth(base=3, top=12)
    assert depth.frames(10.0, 0.05, 0.075) == 3
    assert depth.burst_frames(10.0) == 0.0


def test_single_packet_losses_keep_the_floor_low():
    depth = BurstDepth(base=3, top=12)
    for i in range(40):  # random loss: one packet at a time, two a second
        depth.on_gap(1.0, 0.5 * i)
    assert depth.burst_frames(20.0) == 1.0
    assert depth.frames(20.0, 0.002, 0.02) == 3  # 1 + 1/2 + 0.1 frames: within the reserve


def test_geometric_bursts_need_the_tail_of_their_lengths():
    depth = BurstDepth(base=3, top=30, late_every_s=60.0)
    lengths = [1, 2, 3, 4, 2, 1, 5, 3, 2, 4, 1, 3, 2, 3, 6, 2]  # 16 bursts in 7.5 s
    for i, frames in enumerate(lengths):
        depth.on_gap(float(frames), 0.5 * i)
    expected = len(lengths) / 7.5 * 60.0  # bursts in a minute at this rate
    rho = 1.0 - len(lengths) / sum(lengths)  # P(L > k) = rho ** k
    k = depth.burst_frames(7.5)
    assert k > max(lengths)  # the tail, not merely the longest seen
    assert expected * rho**k <= 1.0 < expected * rho ** (k - 1)  # the least such k
    # the burst's first frame plays (floor - 1/2) frames after it was due: k + 1/2 + RTT
    assert depth.frames(7.5, 0.040, 0.060) == math.ceil(k + 0.5 + 2)
    seldom = BurstDepth(base=3, top=30, late_every_s=5.0)  # a late burst every 5 s is fine
    for i, frames in enumerate(lengths):
        seldom.on_gap(float(frames), 0.5 * i)
    assert max(lengths) <= seldom.burst_frames(7.5) < k
    capped = BurstDepth(base=3, top=8)
    for i, frames in enumerate(lengths):
        capped.on_gap(float(frames), 0.5 * i)
    assert capped.frames(7.5, 0.040, 0.060) == 8  # the latency bound


def test_round_trips_and_red_reach():
    one = BurstDepth(base=2, top=40, round_trips=1, late_every_s=1.0)
    two = BurstDepth(base=2, top=40, round_trips=2, late_every_s=1.0)
    for depth in (one, two):
        depth.on_gap(3.0, 1.0)  # one burst in 5 s, a late one per second allowed: itself
    assert one.burst_frames(1.0) == two.burst_frames(1.0) == 3.0
    assert one.frames(1.0, 0.1, 0.15) == math.ceil(3 + 0.5 + 5)
    assert two.frames(1.0, 0.1, 0.15) == math.ceil(3 + 0.5 + (0.1 + 0.15 + 0.1) / 0.02)
    red = BurstDepth(base=2, top=40, late_every_s=1.0)
    red.on_gap(2.0, 1.0)
    assert red.frames(1.0, 0.1, 0.15, red_frames=2.0) == 3  # RED's copies: no round trip
    longer = BurstDepth(base=2, top=40, late_every_s=1.0)
    longer.on_gap(2.0, 1.0)
    assert longer.frames(1.0, 0.1, 0.15, red_frames=1.0) == 8


def test_one_long_burst_on_a_busy_link_raises_the_floor_at_once():
    depth = BurstDepth(base=3, top=12)
    depth.on_gap(4.0, 1.0)  # bursty until shown otherwise: the first ones must not stall
    # 12 bursts a minute at this rate, mean 4: P(L > 9) = 0.75 ** 9 < 1/12; 9 + 1/2 + 0.1
    assert depth.burst_frames(1.0) == 9.0 and depth.frames(1.0, 0.002, 0.02) == 10


def test_the_loss_tracker_reports_each_gap_once():
    t = LossTracker()
    assert t.on_packet(10).gap == 0
    assert t.on_packet(14).gap == 3
    assert t.on_packet(12).gap == 0 and t.on_packet(12).fills_gap
    assert t.on_packet(15).gap == 0 and t.lost == 3


def test_a_wider_nack_window_asks_for_the_whole_of_a_long_burst():
    narrow = NackGenerator(window_frames=10)
    wide = NackGenerator(window_frames=10)
    wide.window_frames = 16
    for gen in (narrow, wide):
        gen.on_packet(100, 0.0)
        gen.on_packet(113, 0.26)  # 12 lost
    assert len(narrow.poll(0.26)) == 10
    assert wide.poll(0.26) == list(range(101, 113))
    with pytest.raises(ValueError):
        wide.window_frames = 0
    assert not wide.rtt_measured
    wide.set_rtt(0.05)
    assert wide.rtt_measured


# -- the receive path ------------------------------------------------------------------------

# speech, a pause long enough to deepen in, speech again
PCM = np.concatenate([speechy(1.6), quiet(0.6), speechy(2.4, start=2.2)])
PAYLOADS = encode(PCM, 20)
LEARN = {10, 11, 12, 30, 31, 32, 33, 50, 51}  # bursts in the first sentence: 3, 4 and 2
LONG = set(range(150, 157))  # a burst of 7 in the second sentence


def play(config: ReceivePathConfig, drop: set[int], rtt: float = 0.002) -> ReceivePath:
    """Arrivals, playout periods and NACK polls on one virtual clock; each NACKed packet comes
    back one ``rtt`` later."""
    path = ReceivePath(config)
    order = itertools.count()
    sent = packetize(PAYLOADS, 20, start_seq=0)
    by_seq = {p.seq: p for p in sent}
    events: list[tuple[float, int, object]] = [
        (p.at, next(order), p) for p in sent if p.index not in drop]
    events += [(0.015 + FRAME * k, next(order), None) for k in range(len(PAYLOADS) + 30)]
    heapq.heapify(events)
    while events:
        now, _, packet = heapq.heappop(events)
        if packet is None:
            path.tick(now)
        else:
            path.on_packet(packet.seq, packet.ts, packet.payload, SSRC, now)  # type: ignore[attr-defined]
        for seq in path.nack.poll(now, path.jitter.playout_seq):
            heapq.heappush(events, (now + rtt, next(order), by_seq[seq]))
    return path


def stalls_in(path: ReceivePath, first: int, last: int) -> int:
    return sum(1 for p in path.played
               if p.kind is FrameKind.UNDERRUN and first <= p.index <= last)


def test_bursts_learnt_early_let_a_longer_one_be_repaired_in_time():
    config = ReceivePathConfig(log_periods=400)
    learnt = play(config, LEARN | LONG)
    s = learnt.stats
    assert s.lost == len(LEARN | LONG) and s.concealed == 0, s
    assert learnt.burst_floor_frames >= 8  # 7 + 1/2 + a round trip at least
    # the buffer deepened in the pause (inserted silence there, never in speech) ...
    inserted = [p.index for p in learnt.played if p.kind is FrameKind.INSERTED]
    assert inserted and all(80 <= i <= 80 + 30 + 12 for i in inserted), inserted
    # ... so the burst of 7 in the second sentence was repaired with no stall
    assert stalls_in(learnt, 140, 230) == 0
    assert s.recovered_nack == len(LEARN | LONG)
    # without the burst floor, the same burst stalls the playout in speech
    stalled = play(ReceivePathConfig(log_periods=400, burst_depth=False), LEARN | LONG)
    assert stalls_in(stalled, 140, 230) >= 2


def test_a_clean_stream_pays_nothing():
    path = play(ReceivePathConfig(log_periods=400), set())
    s = path.stats
    assert path.burst_floor_frames == path.config.jitter_min_frames == 3
    assert (s.stretched, s.trimmed, s.target_frames) == (0, 0, 3)
    assert s.playout_delay_ms is not None and s.playout_delay_ms <= 50.0 + 1e-6


def test_no_burst_floor_without_nack():
    path = play(ReceivePathConfig(nack=False, log_periods=400), LEARN)
    assert path.burst_floor_frames == path.config.jitter_min_frames == 2


def test_the_jitter_floor_may_exceed_what_jitter_alone_reaches():
    from gateway.receive.jitter_buffer import JitterBuffer

    jb = JitterBuffer(min_frames=2, max_frames=5, capacity=50)
    jb.set_min_frames(12)  # a burst floor above max_frames: the target follows
    assert jb.min_frames == jb.target_frames == 12
    with pytest.raises(ValueError):
        jb.set_min_frames(51)
    with pytest.raises(ValueError):
        ReceivePathConfig(burst_round_trips=0)


# -- the start hold (opt-in): the top from the start, until the link has shown its bursts -----


def test_the_start_hold_is_released_at_once_to_what_the_bursts_seen_need():
    clean = BurstDepth(base=3, top=12, start=12, start_hold_s=10.0)
    assert clean.frames(0.0, 0.002, 0.02) == 12  # nothing known yet: the latency bound
    assert clean.frames(9.9, 0.002, 0.02) == 12
    assert clean.frames(10.0, 0.002, 0.02) == 3  # a clean link: all of it at once, not a
    # frame per step_down_s
    bursty = BurstDepth(base=3, top=12, start=12, start_hold_s=10.0)
    bursty.frames(0.0, 0.002, 0.02)
    bursty.on_gap(2.0, 1.0)  # one burst of 2 in the hold: 2 + 1/2 + 0.1 -> 3 ... at this rate
    bursty.on_gap(3.0, 6.0)
    need = BurstDepth(base=3, top=12)
    need.on_gap(2.0, 1.0)
    need.on_gap(3.0, 6.0)
    assert bursty.frames(10.0, 0.002, 0.02) == need.frames(10.0, 0.002, 0.02) < 12
    # a need above the start during the hold is held (the top allows it)
    wide = BurstDepth(base=3, top=30, start=6, start_hold_s=10.0)
    wide.frames(0.0, 0.002, 0.02)
    wide.on_gap(9.0, 1.0)
    assert wide.frames(1.0, 0.002, 0.02) >= 10
    assert wide.frames(10.5, 0.002, 0.02) >= 10  # peak-held after the hold, as ever


def test_the_start_is_within_base_and_top_and_off_by_default():
    assert BurstDepth(base=3, top=12).frames(0.0, 0.002, 0.02) == 3
    assert BurstDepth(base=3, top=8, start=20, start_hold_s=5.0).frames(0.0, 0.002, 0.02) == 8
    assert BurstDepth(base=3, top=8, start=20, start_hold_s=0.0).frames(0.0, 0.002, 0.02) == 3
    with pytest.raises(ValueError):
        BurstDepth(base=3, top=8, start=5, start_hold_s=-1.0)
    with pytest.raises(ValueError):
        ReceivePathConfig(burst_start_frames=-1)


def delay_changes(path: ReceivePath) -> list[tuple[int, int]]:
    """(period, new delay in frames) wherever the playout delay changed (stall, stretch, cut)."""
    out, last = [], None
    for p in path.played:
        if p.seq is None:
            continue
        delay = p.index - p.seq
        if last is not None and delay != last:
            out.append((p.index, delay))
        last = delay
    return out


START = {"burst_start_frames": 12, "burst_start_hold_s": 1.0}


def test_with_the_start_hold_early_bursts_cost_no_change_of_delay():
    held = play(ReceivePathConfig(log_periods=400, **START), LEARN | LONG)
    s = held.stats
    assert s.lost == len(LEARN | LONG) and s.concealed == 0 and s.recovered_nack == s.lost, s
    assert (s.stretched, s.stalled_periods) == (0, 0), s  # never deeper than at the start
    # released to what the bursts seen need: the excess cut in the pause, never in speech
    assert all(80 + 6 <= at <= 80 + 30 for at, _ in delay_changes(held)), delay_changes(held)
    assert held.burst_floor_frames >= 8  # the burst of 7 in the second sentence needs it
    # learnt from the bursts alone, the same stream stalls or deepens on the way
    learnt = play(ReceivePathConfig(log_periods=400), LEARN | LONG)
    assert learnt.stats.stretched + learnt.stats.stalled_periods > 0
    assert len(delay_changes(learnt)) >= 1


def test_a_clean_link_pays_the_start_hold_only_until_the_first_pause_after_it():
    path = play(ReceivePathConfig(log_periods=400, **START), set())
    s = path.stats
    assert path.burst_floor_frames == 3 and s.target_frames == 3
    assert s.trimmed >= 8 and s.stretched == 0 and s.concealed == 0
    changes = delay_changes(path)
    assert len(changes) == 1, changes  # the whole excess cut in one pause ...
    at, delay = changes[0]
    assert 80 + 6 <= at <= 80 + 30, changes  # ... in it (speech 0-1.6 s, quiet 1.6-2.2 s)
    assert delay <= 4  # back to the three-frame buffer (the clock's phase: one period less)
    first = next(p for p in path.played if p.seq is not None)
    assert first.index >= 11  # the price: the first frame played 12 frames after it came
