from gateway.receive.loss_tracker import LossTracker
from gateway.rtp.seqnum import seq_add

F = 0.020


def test_gaps_on_arrival_are_lost_once_and_refills_are_reported():
    t = LossTracker()
    t.on_packet(65534, 0.0)
    assert t.on_packet(1, 3 * F).fills_gap is False  # 65535 and 0 skipped
    assert t.lost == 2
    late = t.on_packet(0, 2 * F)
    assert late.fills_gap and not late.asked_early
    assert t.lost == 2


def test_overdue_packets_are_asked_once_before_any_later_one_arrives():
    t = LossTracker()
    transit = 0.005
    for i in range(5):
        t.on_packet(seq_add(65530, i), i * F)
    newest_due = 4 * F + transit
    assert t.overdue(newest_due + F + 0.009, transit, 0.010) == []  # next one not yet late
    assert t.overdue(newest_due + F + 0.011, transit, 0.010) == [65535]
    assert t.overdue(newest_due + 2 * F + 0.011, transit, 0.010) == [0]  # 65535 not again
    assert t.lost == 2 and t.asked_early == 2
    repair = t.on_packet(65535, 5 * F)
    assert repair.asked_early and not repair.fills_gap
    t.on_packet(1, 7 * F)  # 0 still missing: counted once, as overdue
    assert t.lost == 2


def test_overdue_needs_a_transit_estimate_and_is_bounded_by_the_window():
    t = LossTracker(window_frames=3)
    assert t.overdue(1.0, 0.0, 0.01) == []
    t.on_packet(100, 0.0)
    assert t.overdue(1.0, None, 0.01) == []
    assert t.overdue(1.0, 0.0, 0.01) == [101, 102, 103]


def test_stale_packet_far_behind_changes_nothing_but_three_mean_a_restart():
    t = LossTracker()
    t.on_packet(1000, 0.0)
    assert t.on_packet(500, 0.0) == t.on_packet(501, 0.0)
    t.on_packet(1001, F)
    assert t.lost == 0
    for s in (10, 11, 12):
        t.on_packet(s, 0.0)
    t.on_packet(14, 0.1)
    assert t.lost == 1  # 13, on the new numbering
