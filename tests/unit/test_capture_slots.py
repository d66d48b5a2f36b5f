"""An utterance's slots as a listener heard them, and the voice's frames among them."""

from __future__ import annotations

from gateway.client.capture import KEEP_ALIVE, ReceivedPacket, utterance_slots, voice_frames


def packet(seq: int, payload: bytes, arrival: float = 1.0) -> ReceivedPacket:
    return ReceivedPacket(seq=seq, timestamp=seq * 960, payload=payload, arrival=arrival,
                          payload_type=111, ssrc=1)


def stream(payloads: list[bytes], first_seq: int = 65534) -> list[ReceivedPacket]:
    return [packet(first_seq + i, p) for i, p in enumerate(payloads)]


def test_keep_alive_slots_inside_an_utterance_lengthen_the_run_not_the_frames():
    # silence, then frames a b, two starved slots, c d, then the next utterance's e
    packets = stream([KEEP_ALIVE, b"a", b"b", KEEP_ALIVE, KEEP_ALIVE, b"c", b"d", b"e"])
    slots = utterance_slots(packets, first_seq16=65535, frames_sent=4)
    assert [p.payload for p in slots] == [b"a", b"b", KEEP_ALIVE, KEEP_ALIVE, b"c", b"d"]
    frames = voice_frames(slots)
    assert [p.payload for p in frames] == [b"a", b"b", b"c", b"d"]
    # renumbered back to back from the first frame (across the 16-bit wrap), nothing else moved
    assert [p.seq for p in frames] == [65535, 65536, 65537, 65538]
    assert [p.timestamp for p in frames] == [p.timestamp for p in slots if p.payload != KEEP_ALIVE]


def test_a_lost_frame_still_takes_its_slot():
    packets = stream([b"a", b"b", b"d", b"e"], first_seq=10)
    packets[2].seq, packets[3].seq = 13, 14  # seq 12 (frame c) never arrived
    slots = utterance_slots(packets, first_seq16=10, frames_sent=4)
    assert [p.payload for p in slots] == [b"a", b"b", b"d"]


def test_the_first_frame_is_the_one_after_the_say():
    packets = [packet(5, b"old", arrival=0.5), packet(6, b"x", arrival=0.6),
               packet(65541, b"new", arrival=2.0), packet(65542, b"y", arrival=2.1)]
    slots = utterance_slots(packets, first_seq16=5, frames_sent=2, after=1.0)
    assert [p.payload for p in slots] == [b"new", b"y"]
