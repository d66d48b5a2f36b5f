"""The jitter buffer with packets of other durations, with pauses, and without a sort."""

import math
import random

import pytest

import gateway.receive.jitter_buffer as jitter_buffer
import gateway.receive.jitter_target as jitter_target
import gateway.receive.receive_stats as receive_stats
import gateway.receive.sliding_window as sliding_window
from gateway.receive.jitter_buffer import JitterBuffer, PopKind
from gateway.receive.receive_stats import TransitTracker
from gateway.receive.sliding_window import SlidingWindow

FRAME = 0.020


def feed(jb, packets, pops, *, phase=0.015, duration=None):
    """packets: (seq, ts, arrival); pops at phase + 20 ms * k, one per period."""
    events = sorted(packets, key=lambda p: p[2])
    out, k = [], 0
    for n in range(pops):
        now = phase + n * FRAME
        while k < len(events) and events[k][2] <= now:
            seq, ts, at = events[k]
            jb.insert(seq, ts, b"p%d" % seq, at, duration=duration)
            k += 1
        out.append(jb.pop(now))
    return out


def stream(n, ticks, *, skip=(), delay=0.005):
    return [(i, 1000 + i * ticks, (i + 1) * ticks / 48000 + delay) for i in range(n)
            if i not in skip]


def test_a_slot_counts_for_its_duration():
    jb = JitterBuffer()
    jb.insert(0, 0, b"a", 0.0, duration=2880)  # 60 ms
    assert jb.depth_frames == 3 and jb.packet_ticks == 2880
    assert jb.target_frames == 4  # one 60 ms packet playing, one in reserve
    jb.insert(1, 2880, b"b", 0.06, duration=2880)
    assert jb.depth_frames == 6 and jb.stats.depth == 6
    r = jb.pop(0.065)
    assert r.kind is PopKind.FRAME and r.duration == 2880 and r.ts_gap == 0


@pytest.mark.parametrize("ticks", [480, 960, 1920, 2880])
def test_a_lost_slot_lasts_what_the_timestamps_around_it_say(ticks):
    jb = JitterBuffer()
    # pop when the audio runs out: every ticks/960 periods (twice a period for 10 ms)
    lost = []
    packets = stream(40, ticks, skip={20})
    events = sorted(packets, key=lambda p: p[2])
    t, k = 0.015, 0
    while t < 40 * ticks / 48000 + 0.2:
        while k < len(events) and events[k][2] <= t:
            seq, ts, at = events[k]
            jb.insert(seq, ts, b"x", at, duration=ticks)
            k += 1
        r = jb.pop(t)
        if r.kind is PopKind.LOST:
            lost.append(r)
        t += ticks / 48000 if r.kind is not PopKind.UNDERRUN else FRAME
    assert [(r.seq, r.duration, r.fec_payload) for r in lost] == [(20, ticks, b"x")]
    assert jb.stats.lost == 1 and jb.stats.underruns == 1  # (the end)


def test_a_lost_slot_next_to_a_timestamp_jump_lasts_one_packet():
    jb = JitterBuffer()
    packets = stream(10, 960)
    packets.append((11, 1000 + 960 * 61, 12 * FRAME))  # 10 lost; 11 jumped 1 s in timestamp
    packets.append((12, 1000 + 960 * 62, 13 * FRAME))
    results = [r for r in feed(jb, packets, 20) if r.kind is not PopKind.UNDERRUN]
    lost = next(r for r in results if r.kind is PopKind.LOST)
    assert (lost.seq, lost.duration) == (10, 960)  # not the 1 s the timestamps span
    after = next(r for r in results if r.seq == 11)
    assert after.kind is PopKind.FRAME and after.ts_gap == 48000
    assert jb.stats.lost == 1 and jb.stats.pauses == 0


def test_a_packet_lost_before_a_pause_is_skipped_and_the_pause_is_one():
    jb = JitterBuffer()
    packets = stream(10, 960)
    packets.append((11, 1000 + 960 * 60, 1.0))  # 10 lost, then 1 s of nothing
    packets.append((12, 1000 + 960 * 61, 1.02))
    frames = [r.seq for r in feed(jb, packets, 60) if r.kind is PopKind.FRAME]
    assert frames == [*range(10), 11, 12]
    assert jb.stats.lost == 1 and jb.stats.pauses == 1


def test_resuming_later_in_timestamp_with_no_sequence_gap_is_a_pause():
    jb = JitterBuffer()
    pause = 48000 * 2  # 2 s: nothing sent, the next packet's timestamp says so
    packets = [(i, 1000 + 960 * i + (pause if i >= 20 else 0), (i + 1) * FRAME +
                (2.0 if i >= 20 else 0.0) + 0.005) for i in range(40)]
    results = feed(jb, packets, 150)
    resumed = next(r for r in results if r.kind is PopKind.FRAME and r.seq == 20)
    assert resumed.ts_gap == pause
    s = jb.stats
    assert (s.lost, s.late, s.dropped, s.pauses) == (0, 0, 0, 1)
    assert s.underruns == 2  # the pause, and the end of the stream
    assert s.target_frames == 2 and s.jitter_ms < 1.0


def test_a_timestamp_jump_between_buffered_packets_is_not_filled():
    jb = JitterBuffer()
    packets = [(i, 1000 + 960 * i + (48000 if i >= 10 else 0), (i + 1) * FRAME) for i in range(20)]
    frames = [r for r in feed(jb, packets, 25) if r.kind is PopKind.FRAME]
    assert [r.seq for r in frames] == list(range(len(frames)))  # back to back
    assert [r.ts_gap for r in frames if r.ts_gap] == [48000]
    assert jb.stats.pauses == 0 and jb.stats.lost == 0


def test_a_burst_lost_in_an_underrun_is_skipped_by_duration():
    jb = JitterBuffer()
    # 40 ms packets; 10..13 lost (160 ms): the buffer runs dry, then skips them when 14 comes
    results = feed(jb, stream(30, 1920, skip={10, 11, 12, 13}), 80, duration=1920)
    frames = [r.seq for r in results if r.kind is PopKind.FRAME]
    assert frames == [*range(10), *range(14, 30)]
    assert jb.stats.lost == 4 and jb.stats.pauses == 0


# -- the delay measurement: same targets, no sort ----------------------------------------


def reference_targets(transits_in, window=50, quantile=0.95, frame_s=FRAME):
    """The target series of the old implementation (sorted on every packet)."""
    from collections import deque

    transits, variations = deque(maxlen=window), deque(maxlen=window)
    target, justified, out = 2, None, []
    for arrival, transit in transits_in:
        transits.append(transit)
        variations.append(transit - min(transits))
        ordered = sorted(variations)
        variation = ordered[min(len(ordered) - 1, int(quantile * len(ordered)))]
        need = max(2, min(5, 1 + math.ceil(variation / frame_s - 1e-9)))
        if need >= target:
            target, justified = need, arrival
        elif justified is None:
            justified = arrival
        elif arrival - justified >= 2.0:
            target, justified = target - 1, arrival
        out.append(target)
    return out


def test_targets_match_the_sorting_implementation_without_sorting(monkeypatch):
    def no_sort(*args, **kwargs):
        raise AssertionError("sorted() on the packet path")

    for module in (jitter_buffer, jitter_target, sliding_window, receive_stats):
        monkeypatch.setattr(module, "sorted", no_sort, raising=False)
    rng = random.Random(7)
    jb = JitterBuffer()
    transit = TransitTracker()
    targets, seen = [], []
    for i in range(3000):
        jitter = rng.uniform(0, 0.07) if 800 <= i < 1600 else rng.uniform(0, 0.004)
        arrival = i * FRAME + jitter
        jb.insert(i & 0xFFFF, i * 960, b"x", arrival)
        transit.add(arrival - i * 960 / 48000)
        assert transit.minimum is not None
        jb.pop(arrival)
        targets.append(jb.target_frames)
        seen.append((arrival, arrival - i * 960 / 48000))
    monkeypatch.undo()
    assert targets == reference_targets(seen)
    assert len(set(targets)) >= 3  # the series did move


@pytest.mark.parametrize("size", [1, 5, 50])
def test_sliding_window_order_statistics(size):
    rng = random.Random(size)
    window = SlidingWindow(size)
    values: list[float] = []
    for _ in range(500):
        v = rng.choice([rng.random(), 0.5])  # duplicates too
        window.add(v)
        values = [*values, v][-size:]
        ordered = sorted(values)
        assert window.minimum() == ordered[0] and len(window) == len(values)
        assert window.quantile(0.95) == ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        assert window.at(len(ordered) // 2) == ordered[len(ordered) // 2]
