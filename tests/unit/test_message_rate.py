"""The per-socket message rate (runtime/message_rate.py): a token bucket, a fake clock."""

import pytest

from gateway.runtime.message_rate import MessageRate


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_then_the_rate():
    clock = Clock()
    rate = MessageRate(10.0, 20.0, clock)
    assert sum(rate.allow() for _ in range(50)) == 20  # the burst
    assert rate.refused == 30
    clock.t += 1.0
    assert sum(rate.allow() for _ in range(50)) == 10  # a second of the rate
    clock.t += 100.0
    assert sum(rate.allow() for _ in range(50)) == 20  # never more than the burst saved up


def test_nonsense_bounds_are_refused():
    with pytest.raises(ValueError):
        MessageRate(0.0, 10.0)
    with pytest.raises(ValueError):
        MessageRate(10.0, 0.5)
