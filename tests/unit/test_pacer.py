"""The pacing clock on a fake monotonic clock: absolute schedule, no drift, stall recovery."""

import pytest

from gateway.webrtc.pacer import PacingClock


class FakeTime:
    def __init__(self, oversleep: float = 0.0) -> None:
        self.now = 1000.0
        self.oversleep = oversleep
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay + self.oversleep


async def test_slots_follow_an_absolute_schedule_without_drift():
    t = FakeTime(oversleep=0.0013)  # every wake-up is 1.3 ms late, like a busy event loop
    pacer = PacingClock(period=0.02, clock=t.clock, sleep=t.sleep)
    release_times = []
    for expected in range(500):
        assert await pacer.wait_next() == expected
        release_times.append(t.now)
    # Lateness never accumulates: slot n >= 1 is released 1.3 ms after origin + n * 20 ms.
    origin = release_times[0]
    assert release_times[-1] - origin == pytest.approx(499 * 0.02 + 0.0013, abs=1e-9)
    assert release_times[250] - origin == pytest.approx(250 * 0.02 + 0.0013, abs=1e-9)
    assert pacer.stats.rebases == 0 and pacer.stats.late_slots == 0


async def test_work_between_slots_is_absorbed():
    t = FakeTime()
    pacer = PacingClock(period=0.02, clock=t.clock, sleep=t.sleep)
    await pacer.wait_next()
    t.now += 0.015  # 15 ms of work after the first slot
    await pacer.wait_next()
    assert t.sleeps[-1] == pytest.approx(0.005)
    assert t.now == pytest.approx(1000.02)


async def test_a_stall_rebases_instead_of_bursting():
    t = FakeTime()
    pacer = PacingClock(period=0.02, max_lateness=0.1, clock=t.clock, sleep=t.sleep)
    await pacer.wait_next()
    t.now += 0.5  # the process stalled for half a second
    await pacer.wait_next()  # overdue: released at once
    assert pacer.stats.rebases == 1
    before = len(t.sleeps)
    await pacer.wait_next()  # the next slot is a full period later, not due immediately
    assert len(t.sleeps) == before + 1 and t.sleeps[-1] == pytest.approx(0.02)


async def test_small_lateness_catches_up_without_rebase():
    t = FakeTime()
    pacer = PacingClock(period=0.02, max_lateness=0.1, clock=t.clock, sleep=t.sleep)
    await pacer.wait_next()
    t.now += 0.05  # 30 ms late for the next slot: catch up, keep the schedule
    await pacer.wait_next()
    await pacer.wait_next()
    assert pacer.stats.rebases == 0 and pacer.stats.late_slots == 2  # caught up in 2 slots
    assert pacer.deadline() == pytest.approx(1000.06)


def test_period_must_be_positive():
    with pytest.raises(ValueError):
        PacingClock(period=0)


@pytest.mark.parametrize("gaps", [
    [0.02] * 20,  # on time
    [0.02, 0.045, 0.001, 0.02, 0.07, 0.0, 0.02],  # late ticks: catch-up bursts
    [0.02, 0.5, 0.02, 0.02, 0.3, 0.001, 0.02],  # stalls: re-anchored
])
def test_release_due_releases_what_a_release_loop_would(gaps):
    """The batch path's one call per tick (``release_due``) against the loop it replaces
    (``time_to_next`` + ``release`` per slot): the same slots, the same next deadline, the same
    statistics, on and off the grid."""
    align = lambda t: round(t / 0.0025 + 0.4999) * 0.0025  # noqa: E731
    for grid in (None, align):
        a_time, b_time = FakeTime(), FakeTime()
        a = PacingClock(period=0.02, clock=a_time.clock, align=grid)
        b = PacingClock(period=0.02, clock=b_time.clock, align=grid)
        for gap in gaps:
            a_time.now += gap
            b_time.now += gap
            looped = []
            while b.time_to_next(b_time.now) <= 0.0005 and len(looped) < 5:
                looped.append(b.release(b_time.now))
            slots, due = a.release_due(a_time.now, 5)
            assert list(slots) == looped
            assert due == b.deadline()
            assert a.stats == b.stats
