import random

import pytest

from gateway.rtp.seqnum import Unwrapper, seq_add, seq_diff, seq_newer, serial_diff, ts_diff


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (0, 0, 0),
        (1, 0, 1),
        (0, 1, -1),
        (0, 65535, 1),
        (65535, 0, -1),
        (5, 65530, 11),
        (65530, 5, -11),
        (32767, 0, 32767),
        (32768, 0, -32768),
        (0, 32768, -32768),
    ],
)
def test_seq_diff(a, b, expected):
    assert seq_diff(a, b) == expected
    assert serial_diff(a, b, 16) == expected


def test_seq_newer_wrap_and_half_space():
    assert seq_newer(0, 65535)
    assert not seq_newer(65535, 0)
    assert not seq_newer(7, 7)
    # exactly half the space apart: undefined in RFC 1982, neither is newer
    assert not seq_newer(32768, 0)
    assert not seq_newer(0, 32768)


def test_seq_diff_matches_modular_reference():
    rng = random.Random(1)
    for _ in range(5000):
        a, b = rng.randrange(65536), rng.randrange(65536)
        d = seq_diff(a, b)
        assert -32768 <= d <= 32767
        assert (b + d) % 65536 == a
        assert seq_add(b, d) == a


def test_seq_add():
    assert seq_add(65535, 1) == 0
    assert seq_add(0, -1) == 65535
    assert seq_add(10, 65536) == 10


def test_ts_diff_32bit():
    assert ts_diff(0, 0xFFFFFFFF) == 1
    assert ts_diff(960, 0xFFFFFFFF - 959) == 1920
    assert ts_diff(0xFFFFFFFF, 0) == -1


def test_unwrapper_crosses_wrap_forward():
    u = Unwrapper()
    assert u.unwrap(65534) == 65534
    assert u.unwrap(65535) == 65535
    assert u.unwrap(0) == 65536
    assert u.unwrap(1) == 65537
    # reordered old value does not move the reference back
    assert u.unwrap(65535) == 65535
    assert u.unwrap(2) == 65538


def test_unwrapper_backwards_from_start():
    u = Unwrapper()
    assert u.unwrap(3) == 3
    assert u.unwrap(65534) == -2
    assert u.unwrap(4) == 4


def test_unwrapper_long_run_is_monotonic():
    u = Unwrapper()
    start = 60000
    for i in range(200_000):
        assert u.unwrap((start + i) % 65536) == start + i


def test_unwrapper_peek_and_reset_and_range():
    u = Unwrapper(32)
    assert u.peek(5) == 5
    u.unwrap(0xFFFFFFF0)
    assert u.peek(0x10) == 0x100000010
    assert u.unwrap(0xFFFFFFF1) == 0xFFFFFFF1  # peek did not change state
    u.reset()
    assert u.unwrap(7) == 7
    with pytest.raises(ValueError):
        u.unwrap(1 << 32)
    with pytest.raises(ValueError):
        Unwrapper().unwrap(-1)
