"""``RedSender.sent_plain``: silence sent from C while RED was inactive leaves the history and
the counters as ``wrap`` would have, so a RED packet after it carries the right previous
frames."""

from __future__ import annotations

from gateway.rtp import red as rfc2198
from gateway.webrtc.red_sender import RedSender


def test_plain_packets_sent_elsewhere_leave_the_history_as_wrap_would():
    by_wrap, by_note = RedSender(111, 63, distance=2), RedSender(111, 63, distance=2)
    silence = b"\xf8\xff\xfe"
    for ts in (0, 960, 1920):
        by_wrap.wrap(b"speech", ts, now=0.0)
        by_note.wrap(b"speech", ts, now=0.0)
    for ts in range(2880, 2880 + 5 * 960, 960):  # five silent packets, RED inactive
        by_wrap.wrap(silence, ts, now=0.0)
    by_note.sent_plain(silence, 2880 + 4 * 960, 5)
    assert list(by_note._history) == list(by_wrap._history)
    assert by_note.stats == by_wrap.stats
    for sender in (by_wrap, by_note):
        sender.loss_reported(now=1.0)
    out = [s.wrap(b"next", 2880 + 5 * 960, now=1.0) for s in (by_wrap, by_note)]
    assert out[0] == out[1]
    blocks = rfc2198.decode(out[0][0])
    assert [(b.data, b.timestamp_offset) for b in blocks] == [
        (silence, 1920), (silence, 960), (b"next", 0)]
