from dataclasses import dataclass

import pytest

from gateway.media.frame_store import FrameStore
from gateway.media.frames import EncodedFrame


@dataclass
class Pkt:
    sequence_number: int
    timestamp: int
    payload: bytes = b""


class Owner:
    def __init__(self):
        self.sent = []

    def on_frame_sent(self, frame, seq, timestamp, at):
        self.sent.append((frame.index, seq, timestamp))


def fill(store: FrameStore, start: int, count: int) -> None:
    for i in range(count):
        seq = (start + i) & 0xFFFF
        store[seq] = Pkt(seq, i * 960, bytes([i & 0xFF]))


def test_keeps_exactly_the_newest_250():
    store = FrameStore(250)
    fill(store, 100, 1000)
    newest = (100 + 999) & 0xFFFF
    assert store.lookup(newest).seq == newest
    assert store.lookup(newest - 249) is not None
    assert store.lookup(newest - 250) is None  # older than 5 s
    assert store.lookup(newest + 1) is None  # never sent
    assert len(store) == 250


def test_wraps_across_65535():
    store = FrameStore(250)
    fill(store, 65500, 100)  # 65500..65535, 0..63
    assert store.lookup(65535).seq == 65535
    assert store.lookup(0).seq == 0 and store.lookup(63).seq == 63
    assert store.lookup(65500).seq == 65500
    assert store.lookup(64) is None
    assert store.get(65535).sequence_number == 65535  # aiortc's mapping protocol


def test_attributes_the_packet_to_the_frame_the_track_handed_over():
    store = FrameStore()
    owner = Owner()
    store.next_frame = EncodedFrame(b"x", owner, index=7)
    store[5] = Pkt(5, 4800)
    store[6] = Pkt(6, 5760)  # silence: no frame handed over
    assert owner.sent == [(7, 5, 4800)]
    assert store.lookup(5).frame.index == 7 and store.lookup(6).frame is None


def test_capacity_bounds():
    with pytest.raises(ValueError):
        FrameStore(0)
    with pytest.raises(ValueError):
        FrameStore(257)
