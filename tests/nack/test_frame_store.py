from types import SimpleNamespace

import pytest

from gateway.media.frames import EncodedFrame
from gateway.media.opus_codec import silence_packet
from gateway.nack.store import FrameStore
from gateway.webrtc.rtp_sink import RtpSink
from tests.aiortc_track import SenderHistory


class Owner:
    cancelled = False

    def __init__(self):
        self.sent = []

    def on_frame_sent(self, index, seq, timestamp, at):
        self.sent.append((index, seq, timestamp))


def fill(store: FrameStore, start: int, count: int) -> None:
    for i in range(count):
        seq = (start + i) & 0xFFFF
        store.record_sent(seq, i * 960, bytes([i & 0xFF]), None)


def test_keeps_exactly_the_newest_250():
    store = batch_store()
    fill(store, 100, 1000)
    newest = (100 + 999) & 0xFFFF
    assert store.lookup(newest).seq == newest
    assert store.lookup(newest - 249) is not None
    assert store.lookup(newest - 250) is None  # older than 5 s
    assert store.lookup(newest + 1) is None  # never sent
    assert len(store) == 250


def test_wraps_across_65535():
    store = batch_store()
    fill(store, 65500, 100)  # 65500..65535, 0..63
    assert store.lookup(65535).seq == 65535
    assert store.lookup(0).seq == 0 and store.lookup(63).seq == 63
    assert store.lookup(65500).seq == 65500
    assert store.lookup(64) is None


def aiortc_packet(seq, ts, payload=b"\x68", ast=5):
    return SimpleNamespace(sequence_number=seq, timestamp=ts, payload=payload,
                           extensions=SimpleNamespace(abs_send_time=ast))


def test_aiortc_history_attributes_the_packet_to_the_frame_the_track_handed_over():
    store = batch_store()
    history = SenderHistory(RtpSink(store=store, queue=None, silence=b"", ticker=None,
                                    pacer=object()))
    owner = Owner()
    history.next_frame = EncodedFrame(b"x", owner, index=7)
    history[5 % 128] = aiortc_packet(5, 4800, b"x")
    history[6] = aiortc_packet(6, 5760)  # silence: no frame handed over
    assert owner.sent == [(7, 5, 4800)]
    assert store.lookup(5).frame.index == 7 and store.lookup(6).frame is None
    assert store.lookup(5).payload == b"x"
    assert history.get(5) is None  # aiortc never resends: our Retransmitter answers NACKs


def test_aiortc_history_survives_a_failing_owner():
    class Failing(Owner):
        def on_frame_sent(self, index, seq, timestamp, at):
            raise RuntimeError("boom")

    store = batch_store()
    sink = RtpSink(store=store, queue=None, silence=silence_packet(), ticker=None, pacer=object())
    history = SenderHistory(sink)
    history.next_frame = EncodedFrame(b"x", Failing(), index=0)
    history[1] = aiortc_packet(1, 960)  # must not raise into aiortc's send loop
    history[2] = aiortc_packet(2, 1920)
    assert sink.stats.send_errors == 1 and store.lookup(2) is not None


def test_lookup_needs_the_header_template():
    store = FrameStore()
    store.record_sent(1, 960, b"x", None)
    assert store.lookup(1) is None  # no send path has started: nothing to rebuild from


def test_capacity_bounds():
    with pytest.raises(ValueError):
        FrameStore(0)
    with pytest.raises(ValueError):
        FrameStore(257)


def header_template(payload_type: int = 111):
    """The stream's header template as the batch path makes it (mid and abs-send-time)."""
    from aiortc.rtcrtpparameters import RTCRtpHeaderExtensionParameters, RTCRtpParameters
    from aiortc.rtp import HeaderExtensionsMap

    from gateway.rtp.header import RtpHeaderTemplate

    m = HeaderExtensionsMap()
    m.configure(RTCRtpParameters(headerExtensions=[
        RTCRtpHeaderExtensionParameters(id=1, uri="urn:ietf:params:rtp-hdrext:sdes:mid"),
        RTCRtpHeaderExtensionParameters(
            id=3, uri="http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time"),
    ]))
    return RtpHeaderTemplate.from_aiortc(payload_type, 0x1234, m, "0")


def batch_store():
    store = FrameStore(250)
    store.header = header_template()
    return store


def test_batch_path_packets_are_rebuilt_byte_identical():
    store = batch_store()
    assert store.header is not None
    sent = {}
    for i in range(300):
        seq, ts, ast = (65400 + i) & 0xFFFF, i * 960, (i * 7919) & 0xFFFFFF
        payload = bytes([i & 0xFF]) * (1 + i % 90)
        sent[seq] = store.header.build(seq, ts, ast.to_bytes(3, "big"), payload)
        store.record_sent(seq, ts, payload, None, abs_send_time=ast)
    newest = (65400 + 299) & 0xFFFF
    for seq in ((newest - k) & 0xFFFF for k in range(250)):
        entry = store.lookup(seq)
        assert entry.packet == sent[seq]
        assert entry.payload == sent[seq][-len(entry.payload):]
    assert store.lookup((newest - 250) & 0xFFFF) is None


def test_recording_allocates_no_tracked_objects():
    import gc

    store = batch_store()
    silence = b"\xf8\xff\xfe"
    store.record_sent(0, 0, silence, None)
    gc.disable()
    try:
        before = len(gc.get_objects())
        for seq in range(1, 1000):
            store.record_sent(seq, seq * 960, silence, None, abs_send_time=seq)
        assert len(gc.get_objects()) - before <= 2  # no object per packet
    finally:
        gc.enable()


def red_batch_store(max_distance: int):
    """A batch store whose stream sends RED (payload type 63 over Opus 111), and its sender."""
    from gateway.webrtc.red_sender import RedSender

    store = batch_store()
    store.red_header = header_template(63)
    store.red_opus_pt = 111
    return store, RedSender(63, 111, distance=2, adaptive=False, max_distance=max_distance)


def test_red_packets_are_kept_as_primaries_and_rebuilt_byte_identical():
    from gateway.nack.store import RED_REBUILT

    store, red = red_batch_store(max_distance=8)
    sent, primaries = {}, {}
    for i in range(300):
        seq, ts = (65400 + i) & 0xFFFF, (i * 960) & 0xFFFFFFFF
        if i == 3:
            red.burst_reported(8, now=0.0)  # the distance raised from 2 to 8 from here on
        primary = bytes([0x68, i & 0xFF]) * (1 + i % 60)
        payload, how = red.wrap(primary, ts, now=0.0)
        assert how == RED_REBUILT + min(i, red.distance_at(0.0))
        sent[seq] = payload
        primaries[seq] = primary
        store.record_sent(seq, ts, primary, None, 0, i, 0.0, how)
    newest = (65400 + 299) & 0xFFFF
    for back in range(248):
        seq = (newest - back) & 0xFFFF
        entry = store.lookup(seq)
        assert entry.red and entry.payload == sent[seq]  # byte-identical to what was sent
        assert entry.packet.endswith(sent[seq])
        assert store.kept_payload(seq) is primaries[seq]  # only the primary is kept
    # the window's oldest two carried packets the 256-slot ring has overwritten since
    assert store.lookup((newest - 248) & 0xFFFF) is None
    assert store.lookup((newest - 249) & 0xFFFF) is None


def test_a_red_packet_whose_previous_packets_are_missing_is_not_answered():
    from gateway.nack.store import RED_REBUILT

    store, _ = red_batch_store(max_distance=2)
    store.record_sent(8, 0, b"\x68a", None)
    store.record_sent(10, 1920, b"\x68c", None, red=RED_REBUILT + 2)  # 9 was never recorded
    assert store.lookup(10) is None
    store.record_sent(11, 2880, b"\x68d", None, red=RED_REBUILT + 1)
    assert store.lookup(11).payload.endswith(b"\x68c\x68d")
