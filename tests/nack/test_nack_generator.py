import random

import pytest

from gateway.nack.generator import NackGenerator
from gateway.rtp.seqnum import seq_add


def feed(gen, seqs, t=0.0):
    for s in seqs:
        gen.on_packet(s, t)


def test_no_gap_no_nack():
    gen = NackGenerator()
    feed(gen, range(100))
    assert gen.poll(1.0) == []
    assert gen.stats.nacks_sent == 0


def test_gap_is_nacked_then_retried_after_rtt_up_to_max():
    gen = NackGenerator(rtt_s=0.05, rtt_factor=1.0, max_retries=3, auto_rtt=False)
    feed(gen, [10, 11, 14])
    assert gen.missing == [12, 13]
    assert gen.poll(0.0) == [12, 13]
    assert gen.poll(0.049) == []  # before one RTT
    assert gen.poll(0.05) == [12, 13]
    assert gen.poll(0.10) == [12, 13]
    assert gen.poll(0.15) == []  # three tries used up
    s = gen.stats
    assert (s.nacks_sent, s.seqs_requested, s.missing) == (3, 6, 2)


def test_min_interval_floor():
    gen = NackGenerator(rtt_s=0.0, min_interval_s=0.02, auto_rtt=False)
    feed(gen, [1, 3])
    assert gen.poll(0.0) == [2]
    assert gen.poll(0.01) == []
    assert gen.poll(0.02) == [2]


def test_initial_delay_tolerates_reordering():
    gen = NackGenerator(initial_delay_s=0.01)
    gen.on_packet(1, 0.0)
    gen.on_packet(3, 0.0)
    assert gen.poll(0.005) == []
    gen.on_packet(2, 0.006)  # just reordered
    assert gen.poll(0.02) == []
    assert gen.stats.recovered == 0


def test_recovered_and_repair_flag():
    gen = NackGenerator()
    feed(gen, [1, 4])
    assert gen.poll(0.0) == [2, 3]
    assert gen.on_packet(2, 0.03) is True
    assert gen.on_packet(2, 0.031) is False  # duplicate repair
    assert gen.on_packet(5, 0.04) is False
    assert gen.stats.recovered == 1
    assert gen.missing == [3]


def test_auto_rtt_karn():
    gen = NackGenerator(rtt_s=0.1)
    feed(gen, [1, 3, 5])
    gen.poll(0.0)
    gen.on_packet(2, 0.02)  # asked once: a clean RTT sample of 20 ms (replaces the guess)
    assert gen.rtt_s == pytest.approx(0.02)
    gen.poll(0.2)  # 4 asked a second time
    rtt = gen.rtt_s
    gen.on_packet(4, 0.21)  # ambiguous sample: ignored
    assert gen.rtt_s == rtt
    gen.set_rtt(0.03)
    assert gen.rtt_s == 0.03
    assert gen.stats.rtt_ms == pytest.approx(30.0)
    with pytest.raises(ValueError):
        gen.set_rtt(-1)


def test_window_forgets_old_missing():
    gen = NackGenerator(window_frames=10)
    feed(gen, [0, 2])
    assert gen.missing == [1]
    feed(gen, range(3, 12))
    assert gen.missing == [1]  # kept while at most 10 behind the newest (11)
    gen.on_packet(12, 0.0)
    assert gen.missing == []
    assert gen.stats.given_up == 1


def test_big_gap_only_tracks_window():
    gen = NackGenerator(window_frames=10)
    feed(gen, [0, 500])
    assert gen.missing == list(range(490, 500))


def test_playout_point_drops_unplayable():
    gen = NackGenerator()
    feed(gen, [100, 105])
    assert gen.poll(0.0, playout_seq=103) == [103, 104]
    assert gen.missing == [103, 104]
    assert gen.stats.given_up == 2


def test_playout_point_garbage_ignored():
    gen = NackGenerator()
    feed(gen, [100, 105])
    assert gen.poll(0.0, playout_seq=20000) == [101, 102, 103, 104]


def test_wrap():
    gen = NackGenerator()
    feed(gen, [65533, 65534, 1, 2])
    assert gen.missing == [65535, 0]
    assert gen.poll(0.0, playout_seq=65535) == [65535, 0]
    assert gen.on_packet(0, 0.01) is True
    assert gen.poll(0.2, playout_seq=0) == []
    assert gen.stats.given_up == 1


def test_max_tracked_bound():
    gen = NackGenerator(window_frames=100, max_tracked=16)
    feed(gen, [0, 100])
    assert len(gen.missing) == 16
    assert gen.missing == list(range(84, 100))


@pytest.mark.parametrize("jump", [5000, 40000])
def test_sender_restart(jump):
    gen = NackGenerator()
    feed(gen, [10, 11, 13])
    for i in range(5):
        gen.on_packet(seq_add(11, jump + i), 0.1)
    assert gen.missing == []
    gen.on_packet(seq_add(11, jump + 7), 0.2)
    assert gen.missing == [seq_add(11, jump + 5), seq_add(11, jump + 6)]


def test_single_far_straggler_ignored():
    gen = NackGenerator()
    feed(gen, [5000, 5002])
    gen.on_packet(100, 0.0)
    assert gen.missing == [5001]


def test_constructor_validation():
    with pytest.raises(ValueError):
        NackGenerator(window_frames=0)
    with pytest.raises(ValueError):
        NackGenerator(rtt_s=-1)


def test_random_loss_bounded_and_consistent():
    rng = random.Random(3)
    gen = NackGenerator()
    start = 65000
    t = 0.0
    asked = set()
    for i in range(20000):
        t = i * 0.02
        if rng.random() > 0.1:
            gen.on_packet(seq_add(start, i), t)
        for s in gen.poll(t, playout_seq=seq_add(start, i - 3)):
            asked.add(s)
        assert len(gen.missing) <= 10
    s = gen.stats
    assert s.recovered == 0
    assert s.seqs_requested >= len(asked)
    assert 0.08 < len(asked) / 20000 < 0.12


def test_a_pause_asks_for_nothing():
    # DTX / mute: the sender sends nothing for seconds, then the next sequence number
    gen = NackGenerator()
    feed(gen, range(100, 120), t=0.0)
    for k in range(100):  # polled every 20 ms through 2 s of silence
        assert gen.poll(0.02 * k, playout_seq=120) == []
    gen.on_packet(120, 2.0)
    assert gen.poll(2.0) == [] and gen.stats.nacks_sent == 0 and not gen.missing
