"""The test-only loss of first transmissions: independent or in Gilbert-Elliott bursts."""

from gateway.media.frame_queue import FrameQueue
from gateway.nack.store import FrameStore
from gateway.webrtc.pacer import PacingClock
from gateway.webrtc.rtp_sink import RtpSink


def runs(burst: float, percent: float = 10.0, n: int = 20_000) -> tuple[float, float]:
    sink = RtpSink(FrameQueue(1), FrameStore(), b"", None, pacer=PacingClock())
    sink.lose_first_transmissions(percent, seed=3, burst=burst)
    lost = [sink.drop_first_tx(b"\x80\x6f" + bytes(10)) for _ in range(n)]
    bursts, length = [], 0
    for x in [*lost, False]:
        if x:
            length += 1
        elif length:
            bursts.append(length)
            length = 0
    return sum(lost) / n, sum(bursts) / len(bursts)


def test_bursty_loss_has_the_rate_and_mean_burst_asked_for():
    rate, mean = runs(burst=3.0)
    assert 0.08 < rate < 0.12 and 2.6 < mean < 3.4


def test_independent_loss_rarely_comes_in_runs():
    rate, mean = runs(burst=0.0)
    assert 0.08 < rate < 0.12 and mean < 1.2
