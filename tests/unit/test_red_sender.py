"""The RED sender's adaptive distance: NACK runs are the bursts the receiver saw."""

from __future__ import annotations

import pytest

from gateway.rtp import red
from gateway.webrtc.red_sender import MAX_DISTANCE, RedSender
from gateway.webrtc.retransmission import longest_run


def frames(sender: RedSender, n: int, now: float, start: int = 0) -> list[list[int]]:
    """Wrap ``n`` frames at ``now``; the timestamp offsets of each packet's copies."""
    out = []
    for i in range(start, start + n):
        payload, is_red = sender.wrap(bytes([0x68, i & 0xFF]), 960 * i, now)
        assert is_red
        out.append([b.timestamp_offset for b in red.decode(payload)[:-1]])
    return out


def test_longest_run_of_a_nack():
    assert longest_run([]) == 0
    assert longest_run([7]) == 1
    assert longest_run([10, 11, 12, 20, 21]) == 3
    assert longest_run([65534, 65535, 0, 1, 9]) == 4  # across the wrap
    assert longest_run([5, 3, 4, 4]) == 3  # any order, duplicates


def test_a_long_burst_raises_the_distance_for_a_while():
    sender = RedSender(63, 111, distance=2, adaptive=False, max_distance=4, hold_s=1.0)
    assert frames(sender, 5, 0.0)[-1] == [1920, 960]
    sender.burst_reported(2, 0.1)  # within the distance: nothing
    assert sender.distance_at(0.1) == 2
    sender.burst_reported(6, 0.1)
    assert sender.distance_at(0.1) == 4 and sender.stats.distance_raises == 1
    # the previous four frames, byte for byte, oldest first
    assert frames(sender, 1, 0.2, start=5) == [[3840, 2880, 1920, 960]]
    sender.burst_reported(3, 0.5)  # a shorter one while raised: the hold is not cut short
    assert sender.distance_at(1.05) == 4
    assert sender.distance_at(1.2) == 2
    assert frames(sender, 1, 1.2, start=6) == [[1920, 960]]
    assert sender.as_json(lambda: 1.2)["max_distance"] == 4


def test_no_adaptation_unless_a_maximum_is_given():
    sender = RedSender(63, 111, distance=2, adaptive=False)
    sender.burst_reported(8, 0.0)
    assert sender.distance_at(0.0) == 2 == sender.max_distance
    with pytest.raises(ValueError):
        RedSender(63, 111, distance=3, max_distance=2)
    with pytest.raises(ValueError):
        RedSender(63, 111, distance=2, max_distance=MAX_DISTANCE + 1)
