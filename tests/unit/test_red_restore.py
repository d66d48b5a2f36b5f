"""``RedSender.restore`` from ``FrameStore.last_sent``: after packets went without ``wrap``
(sent from C: speech recorded in the ring and refs, silence in the ring alone), the history
RED goes on from is the store's newest packets, so the next RED packet carries exactly the
previous frames -- and a NACK for it is rebuilt from the same ring, silence included."""

from __future__ import annotations

from gateway.nack.store import PARKED_SILENCE, RED_REBUILT, SILENCE_PRIMARY, FrameStore
from gateway.rtp import red as rfc2198
from gateway.rtp.header import RtpHeaderTemplate
from gateway.webrtc.red_sender import RedSender

SILENCE = b"\xf8\xff\xfe"


def _template(payload_type: int) -> RtpHeaderTemplate:
    return RtpHeaderTemplate(bytes([0x80, payload_type]) + bytes(6) + (7).to_bytes(4, "big"),
                             None)


def _store() -> FrameStore:
    store = FrameStore()
    store.header, store.red_header = _template(111), _template(63)
    store.red_opus_pt, store.silence = 111, SILENCE
    return store


def _c_sent(store: FrameStore, seq: int, ts: int, how: int) -> None:
    """A packet's ring fields as ``gw_run_parked`` writes them."""
    ring = store.ring
    i = (seq & 255) * 4
    ring[i], ring[i + 1], ring[i + 2], ring[i + 3] = seq | how << 16, ts, 0, 0
    ring[256 * 4] = seq
    ring[256 * 4 + 1] += 1


def test_a_sender_restored_from_the_store_wraps_as_one_that_wrapped_every_packet():
    store, by_wrap, restored = _store(), RedSender(63, 111, 2), RedSender(63, 111, 2)
    seq = 100
    for k, payload in enumerate([b"one", b"two", SILENCE, b"three", SILENCE, SILENCE]):
        by_wrap.wrap(payload, k * 960, now=0.0)
        if payload == SILENCE:
            _c_sent(store, seq + k, k * 960, PARKED_SILENCE)
        else:
            _c_sent(store, seq + k, k * 960, 0)
            store.record_run(seq + k, [payload], None)
    restored.wrap(b"stale", 0, now=0.0)  # (what it had before: replaced)
    restored.restore(store.last_sent(restored.max_distance))
    assert list(restored._history) == list(by_wrap._history)
    assert store.last_sent(4) == [(2 * 960, SILENCE), (3 * 960, b"three"),
                                  (4 * 960, SILENCE), (5 * 960, SILENCE)]
    for sender in (by_wrap, restored):
        sender.loss_reported(now=1.0)
    out = [s.wrap(b"next", 6 * 960, now=1.0) for s in (by_wrap, restored)]
    assert out[0] == out[1] == (rfc2198.encode(b"next", 111, [(1920, SILENCE), (960, SILENCE)]),
                                RED_REBUILT + 2)


def test_a_red_packet_after_silence_c_sent_is_rebuilt_with_the_silence():
    """The ring's earlier entries of C's silence (plain, or the primary of RED made there)
    are the silence when a RED packet after them is rebuilt, whatever its refs slot held."""
    store = _store()
    store.record_sent(10, 0, b"stale speech", None)  # (the refs slot 10 keeps)
    _c_sent(store, 10, 9600, PARKED_SILENCE)
    _c_sent(store, 11, 10560, SILENCE_PRIMARY | RED_REBUILT + 1)
    store.record_sent(12, 11520, b"speech", None, red=RED_REBUILT + 2)
    kept = store.lookup(12)
    assert kept is not None and kept.red
    assert kept.payload == rfc2198.encode(b"speech", 111, [(1920, SILENCE), (960, SILENCE)])
    silent = store.lookup(11)
    assert silent is not None and silent.red and silent.frame is None
    assert silent.payload == rfc2198.encode(SILENCE, 111, [(960, SILENCE)])
    assert silent.packet[1] == 63
    assert store.kept_payload(11) == SILENCE
