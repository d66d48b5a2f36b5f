import asyncio
import itertools

import pytest

from gateway.testing.impairment import (
    Impairment,
    ImpairmentConfig,
    from_args,
    parse_spec,
    wrap_sendto,
)


def run_packets(config, n=10000, interval=0.02):
    imp = Impairment(config)
    return imp, [imp.decide(i * interval) for i in range(n)]


def loss_runs(decisions):
    runs, current = [], 0
    for d in decisions:
        if not d:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


def test_no_impairment_is_transparent():
    imp, out = run_packets(ImpairmentConfig(), n=100)
    assert out == [[i * 0.02] for i in range(100)]
    assert imp.stats.offered == 100 and imp.stats.dropped == 0


def test_independent_loss_rate():
    imp, out = run_packets(ImpairmentConfig(loss_pct=5, seed=1))
    lost = sum(1 for d in out if not d)
    assert 400 <= lost <= 600
    assert imp.stats.dropped == lost
    assert sum(loss_runs(out)) / len(loss_runs(out)) < 1.2  # mostly isolated losses


@pytest.mark.parametrize("burst", [2.0, 3.0, 5.0])
def test_gilbert_elliott_rate_and_mean_burst(burst):
    cfg = ImpairmentConfig(loss_pct=5, burst=burst, seed=7)
    assert cfg.expected_loss == pytest.approx(0.05)
    _, out = run_packets(cfg, n=100000)
    runs = loss_runs(out)
    assert sum(runs) / 100000 == pytest.approx(0.05, abs=0.007)
    assert sum(runs) / len(runs) == pytest.approx(burst, rel=0.1)


def test_explicit_gilbert_elliott():
    cfg = ImpairmentConfig(ge_p=0.01, ge_r=0.25, bad_loss=0.8, good_loss=0.001, seed=3)
    p, r = 0.01, 0.25
    expected = p / (p + r) * 0.8 + r / (p + r) * 0.001
    assert cfg.expected_loss == pytest.approx(expected)
    _, out = run_packets(cfg, n=200000)
    assert sum(1 for d in out if not d) / 200000 == pytest.approx(expected, rel=0.1)


def test_deterministic_given_seed():
    cfg = ImpairmentConfig(
        loss_pct=10, burst=2, jitter_ms=30, delay_ms=20, duplicate_pct=5, reorder_pct=3, seed=42
    )
    assert run_packets(cfg, n=2000)[1] == run_packets(cfg, n=2000)[1]
    other = ImpairmentConfig(**{**cfg.__dict__, "seed": 43})
    assert run_packets(other, n=2000)[1] != run_packets(cfg, n=2000)[1]


def test_delay_and_jitter_bounds():
    _, out = run_packets(ImpairmentConfig(delay_ms=50, jitter_ms=20, seed=1), n=5000)
    delays = [d[0] - i * 0.02 for i, d in enumerate(out)]
    assert min(delays) >= 0.030 - 1e-9
    assert max(delays) <= 0.070 + 1e-9
    assert sum(delays) / len(delays) == pytest.approx(0.050, abs=0.002)


def test_jitter_floors_at_zero():
    _, out = run_packets(ImpairmentConfig(jitter_ms=60, seed=1), n=2000)
    delays = [d[0] - i * 0.02 for i, d in enumerate(out)]
    assert min(delays) == 0.0
    assert max(delays) <= 0.060 + 1e-9


def _inversions(out):
    times = [t for d in out for t in d]
    return sum(1 for a, b in itertools.pairwise(times) if b < a)


def test_jitter_reorders_unless_keep_order():
    _, small = run_packets(ImpairmentConfig(delay_ms=50, jitter_ms=5, seed=1), n=2000)
    _, big = run_packets(ImpairmentConfig(delay_ms=50, jitter_ms=60, seed=1), n=2000)
    _, kept = run_packets(
        ImpairmentConfig(delay_ms=50, jitter_ms=60, keep_order=True, seed=1), n=2000
    )
    assert _inversions(small) == 0  # jitter below half the interval cannot reorder
    assert _inversions(big) > 200
    assert _inversions(kept) == 0
    assert max(d[0] - i * 0.02 for i, d in enumerate(kept)) > 0.06


def test_duplicate_and_reorder_rates():
    imp, out = run_packets(ImpairmentConfig(duplicate_pct=10, reorder_pct=5, seed=2))
    dups = sum(1 for d in out if len(d) == 2)
    assert 850 <= dups <= 1150
    assert imp.stats.duplicated == dups
    assert 0.04 < imp.stats.reordered / (10000 + dups) < 0.06
    held = sum(1 for i, d in enumerate(out) for t in d if t > i * 0.02)
    assert held == imp.stats.reordered


def test_reorder_gap_overtakes():
    _, out = run_packets(ImpairmentConfig(reorder_pct=10, reorder_gap_ms=30, seed=5), n=1000)
    assert _inversions(out) > 50


@pytest.mark.parametrize(
    "kwargs",
    [
        {"loss_pct": -1},
        {"loss_pct": 101},
        {"burst": 0.5, "loss_pct": 5},
        {"ge_p": 0.1},
        {"ge_p": 0.1, "ge_r": 0.0},
        {"ge_p": 0.1, "ge_r": 0.5, "loss_pct": 5},
        {"delay_ms": -5},
        {"bad_loss": 2},
        {"max_in_flight": 0},
        {"loss_pct": 100, "burst": 3},
    ],
)
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        ImpairmentConfig(**kwargs)


def test_parse_spec():
    cfg = parse_spec("loss=5,jitter=60,burst=3,seed=1")
    assert cfg == ImpairmentConfig(loss_pct=5, jitter_ms=60, burst=3, seed=1)
    assert parse_spec("") == ImpairmentConfig()
    assert parse_spec(" delay=20 , dup=1, reorder=2, reorder-gap=15, keep_order") == (
        ImpairmentConfig(
            delay_ms=20, duplicate_pct=1, reorder_pct=2, reorder_gap_ms=15, keep_order=True
        )
    )
    assert parse_spec("p=0.01,r=0.3,bad_loss=0.5,keep_order=0").gilbert_elliott() == (
        0.01,
        0.3,
        0.5,
        0.0,
    )
    for bad in ("nope=1", "loss", "loss=abc", "seed=1.5", "loss=200", "keep_order=maybe"):
        with pytest.raises(ValueError):
            parse_spec(bad)


def test_from_args():
    assert from_args(["--loss", "5", "--jitter", "60"]) == ImpairmentConfig(
        loss_pct=5, jitter_ms=60
    )
    assert from_args([]) == ImpairmentConfig()
    assert from_args(["--burst", "3", "--loss", "4", "--seed", "9", "--keep-order"]) == (
        ImpairmentConfig(burst=3, loss_pct=4, seed=9, keep_order=True)
    )
    with pytest.raises(ValueError):
        from_args(["--bogus", "1"])
    with pytest.raises(ValueError):
        from_args(["--loss", "x"])


# --- asyncio adapter -----------------------------------------------------------------------


class FakeHandle:
    def __init__(self, when, callback, args):
        self.when, self.callback, self.args = when, callback, args
        self._cancelled = False

    def cancel(self):
        self._cancelled = True

    def cancelled(self):
        return self._cancelled


class FakeLoop:
    """Just enough of an event loop: time() and call_at() with a manual clock."""

    def __init__(self):
        self.now = 100.0
        self.timers = []

    def time(self):
        return self.now

    def call_at(self, when, callback, *args):
        handle = FakeHandle(when, callback, args)
        self.timers.append(handle)
        return handle

    def advance(self, dt):
        self.now += dt
        due = sorted((h for h in self.timers if h.when <= self.now), key=lambda h: h.when)
        self.timers = [h for h in self.timers if h not in due]
        for h in due:
            if not h.cancelled():
                h.callback(*h.args)


def test_wrap_sendto_delays_with_the_loop_clock():
    loop = FakeLoop()
    sent = []
    send = wrap_sendto(
        lambda d, a: sent.append((loop.now, d, a)), loop, ImpairmentConfig(delay_ms=40)
    )
    send(b"a", ("1.2.3.4", 5))
    send(b"b")
    assert sent == [] and send.in_flight == 2
    loop.advance(0.039)
    assert sent == []
    loop.advance(0.002)
    assert [(d, a) for _, d, a in sent] == [(b"a", ("1.2.3.4", 5)), (b"b", None)]
    assert send.in_flight == 0
    assert send.stats.sent == 2


def test_wrap_sendto_zero_delay_is_synchronous_and_loss_applies():
    loop = FakeLoop()
    sent = []
    send = wrap_sendto(lambda d, a: sent.append(d), loop, ImpairmentConfig(loss_pct=50, seed=1))
    for i in range(1000):
        send(bytes([i % 256]))
    assert 400 < len(sent) < 600
    assert send.in_flight == 0


def test_wrap_sendto_bounded_in_flight_and_close():
    loop = FakeLoop()
    sent = []
    cfg = ImpairmentConfig(delay_ms=100, max_in_flight=10)
    send = wrap_sendto(lambda d, a: sent.append(d), loop, cfg)
    for i in range(25):
        send(bytes([i]))
    assert send.in_flight == 10
    assert send.stats.overflow == 15
    send.close()
    assert send.in_flight == 0
    assert all(h.cancelled() for h in loop.timers)
    loop.advance(1.0)
    send(b"late")
    assert sent == []


def test_wrap_sendto_survives_sendto_errors():
    loop = FakeLoop()

    def broken(data, addr):
        raise OSError("closed")

    send = wrap_sendto(broken, loop, ImpairmentConfig(delay_ms=10))
    send(b"x")
    loop.advance(0.02)
    send(b"y")
    loop.advance(0.02)
    assert send.stats.send_errors == 2


async def test_wrap_sendto_on_a_real_loop_udp():
    loop = asyncio.get_running_loop()
    received = asyncio.Queue()

    class Recv(asyncio.DatagramProtocol):
        def datagram_received(self, data, addr):
            received.put_nowait(data)

    rx, _ = await loop.create_datagram_endpoint(Recv, local_addr=("127.0.0.1", 0))
    tx, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=rx.get_extra_info("sockname")
    )
    try:
        send = wrap_sendto(
            lambda d, a: tx.sendto(d), loop, ImpairmentConfig(delay_ms=5, jitter_ms=4, seed=1)
        )
        for i in range(20):
            send(bytes([i]))
        got = [await asyncio.wait_for(received.get(), 2.0) for _ in range(20)]
        assert sorted(got) == [bytes([i]) for i in range(20)]
        send.close()
    finally:
        tx.close()
        rx.close()
