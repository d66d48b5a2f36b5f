from gateway.receive.loss_tracker import LossTracker
from gateway.rtp.seqnum import seq_add


def test_gaps_on_arrival_are_lost_once_and_refills_are_reported():
    t = LossTracker()
    t.on_packet(65534)
    assert t.on_packet(1).fills_gap is False  # 65535 and 0 skipped
    assert t.lost == 2
    late = t.on_packet(0)
    assert late.fills_gap
    assert t.lost == 2


def test_packets_that_stop_coming_are_not_lost():
    # A sender that pauses (DTX: one packet per 400 ms; mute: none for seconds) resumes on the
    # next sequence number. Nothing is missing, however long the pause: no clock in here.
    t = LossTracker()
    for i in range(5):
        t.on_packet(seq_add(65530, i))
    assert not hasattr(t, "overdue")  # never asks ahead of the newest packet
    for i in range(5, 10):
        assert t.on_packet(seq_add(65530, i)).fills_gap is False
    assert t.lost == 0


def test_stale_packet_far_behind_changes_nothing_but_three_mean_a_restart():
    t = LossTracker()
    t.on_packet(1000)
    assert t.on_packet(500) == t.on_packet(501)
    t.on_packet(1001)
    assert t.lost == 0
    for s in (10, 11, 12):
        t.on_packet(s)
    t.on_packet(14)
    assert t.lost == 1  # 13, on the new numbering
