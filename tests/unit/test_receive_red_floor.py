"""How deep the jitter buffer is kept for repairs: the RED reserve once RED is negotiated, and a
stall that a late NACK repair ended (a burst longer than the buffer) deepens it for a while."""

from __future__ import annotations

import heapq
import itertools

from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.repair_floor import RepairFloor
from tests.opus_streams import FRAME, SSRC, encode, packetize, speechy

PAYLOADS = encode(speechy(3.0), 20)


def test_negotiated_red_reserves_its_depth_from_the_start():
    alone = ReceivePath(ReceivePathConfig(nack=False))
    alone.red_payload_type = 63
    assert alone.jitter.min_frames == alone.jitter.target_frames == 3
    with_nack = ReceivePath(ReceivePathConfig())
    with_nack.red_payload_type = 63
    assert with_nack.jitter.min_frames == 3  # the NACK reserve covers RED's
    off = ReceivePath(ReceivePathConfig(nack=False, red=False))
    off.red_payload_type = 63
    assert off.jitter.min_frames == 2


def play_with_repairs(path: ReceivePath, drop: set[int], periods: int, rtt: float = 0.002):
    """Arrivals, playout periods and NACK polls on one virtual clock; each NACKed packet comes
    back one ``rtt`` later. Returns the jitter buffer's floor after each period."""
    order = itertools.count()
    events = [(p.at, next(order), p) for p in packetize(PAYLOADS, 20, start_seq=0)
              if p.index not in drop]
    by_seq = {p.seq: p for p in packetize(PAYLOADS, 20, start_seq=0)}
    events += [(0.015 + FRAME * k, next(order), None) for k in range(periods)]
    heapq.heapify(events)
    floors = []
    while events:
        now, _, packet = heapq.heappop(events)
        if packet is None:
            path.tick(now)
            floors.append(path.jitter.min_frames)
        else:
            path.on_packet(packet.seq, packet.ts, packet.payload, SSRC, now)
        for seq in path.nack.poll(now, path.jitter.playout_seq):
            heapq.heappush(events, (now + rtt, next(order), by_seq[seq]))
    return floors


def test_a_stall_a_late_repair_ended_is_kept_as_depth_for_a_while():
    # the stall-learnt floor alone (the burst floor, tests/unit/test_receive_burst_depth.py,
    # would deepen for the burst itself)
    path = ReceivePath(ReceivePathConfig(log_periods=200, repair_hold_s=0.5, burst_depth=False))
    floors = play_with_repairs(path, {40, 41, 42}, 140)  # seen 60 ms after 40 was due
    s = path.stats
    assert (s.lost, s.recovered_nack, s.concealed, s.underrun_periods) == (3, 3, 0, 1), s
    assert max(floors) == 4 and floors[30] == 3 and floors[-1] == 3
    # while the floor is up, the stall stays as depth: the next such burst is in time
    deep = ReceivePath(ReceivePathConfig(repair_hold_s=10.0, burst_depth=False))
    play_with_repairs(deep, {40, 41, 42, 80, 81, 82}, 140)
    s = deep.stats
    assert (s.recovered_nack, s.concealed, s.underrun_periods, s.trimmed) == (6, 0, 1, 0), s


def test_repair_floor_bounds_and_decay():
    floor = RepairFloor(3, 5, hold_s=1.0)
    floor.stalled_for_repair(1, 0.0)
    floor.stalled_for_repair(4, 0.5)
    assert floor.frames(0.6) == 5  # at most the largest target
    assert floor.frames(1.5) == 4 and floor.frames(2.0) == 4 and floor.frames(2.5) == 3
    assert floor.frames(100.0) == 3
    off = RepairFloor(3, 5, hold_s=0.0)
    off.stalled_for_repair(2, 0.0)
    assert off.frames(0.0) == 3 and off.raises == 0
