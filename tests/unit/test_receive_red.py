"""RFC 2198 RED on the receive path, with real libopus packets: redundant copies fill missing
frames before NACK, FEC or PLC; they are numbered by timestamp and duration; never played twice."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

import pytest

from gateway.receive.frame_decoder import FrameKind
from gateway.receive.receive_path import ReceivePath, ReceivePathConfig
from gateway.receive.red_recovery import split_red
from gateway.rtp import red
from gateway.rtp.seqnum import seq_add
from tests.opus_streams import Sent, encode, packetize, run, speechy

OPUS_PT = 111
START = 65530  # the sequence numbers wrap inside every stream


def red_stream(
    payloads: list[bytes], packet_ms: float = 20, *, distance: int = 2,
    drop: Collection[int] = (), delay: dict[int, float] | None = None,
) -> list[Sent]:
    """Every packet as RED carrying the previous ``distance`` packets (as the gateway's
    RedSender does), then the ``drop``ped ones taken out and ``delay``ed ones moved."""
    sent = packetize(payloads, packet_ms, start_seq=START)
    out = []
    for i, p in enumerate(sent):
        history = sent[max(0, i - distance) : i]
        blocks = [((p.ts - h.ts) & 0xFFFFFFFF, h.payload) for h in history]
        packet = replace(p, payload=red.encode(p.payload, OPUS_PT, blocks))
        if i in drop:
            continue
        out.append(replace(packet, at=packet.at + (delay or {}).get(i, 0.0)))
    return out


def run_red(path: ReceivePath, packets: list[Sent], periods: int, phase: float = 0.015):
    """opus_streams.run for RED packets: returns what the NACK generator asked for per period."""
    return run(path, packets, periods, phase=phase, red=True)


def recorded(**options) -> ReceivePathConfig:
    return ReceivePathConfig(record_s=5.0, log_periods=500, **options)


PAYLOADS = encode(speechy(2.0), 20)


def played_by_seq(path: ReceivePath) -> dict[int, list]:
    out: dict[int, list] = {}
    for p in path.played:
        if p.seq is not None:
            out.setdefault(p.seq, []).append(p)
    return out


def test_split_red_numbers_the_copies_by_timestamp():
    sent = red_stream(PAYLOADS[:10])
    primary, copies = split_red(sent[5].payload, sent[5].seq, sent[5].ts)
    assert primary == PAYLOADS[5]
    assert [(c.seq, c.payload, c.offset) for c in copies] == [
        (seq_add(START, 3), PAYLOADS[3], 1920),
        (seq_add(START, 4), PAYLOADS[4], 960),
    ]


def test_split_red_uses_each_copy_s_own_duration():
    payloads = encode(speechy(1.0), 40)
    sent = red_stream(payloads, 40)
    _, copies = split_red(sent[6].payload, sent[6].seq, sent[6].ts)
    assert [(c.seq, c.offset) for c in copies] == [(seq_add(START, 4), 3840),
                                                   (seq_add(START, 5), 1920)]


def test_split_red_stops_where_the_copies_do_not_join_up():
    # a pause between the copy and the primary: the copy cannot be numbered, so it is not used
    payload = red.encode(PAYLOADS[9], OPUS_PT, [(960 * 30, PAYLOADS[2]), (960, PAYLOADS[8])])
    _, copies = split_red(payload, 100, 50_000)
    assert [(c.seq, c.timestamp) for c in copies] == [(99, 50_000 - 960)]


def test_a_burst_of_two_is_rebuilt_from_the_next_packet_with_no_nack():
    lost = {30, 31}
    path = ReceivePath(recorded())
    asked = run_red(path, red_stream(PAYLOADS, drop=lost), 90)
    assert [s for a in asked for s in a] == []
    by_seq = played_by_seq(path)
    for i in lost:
        (period,) = by_seq[seq_add(START, i)]
        assert period.kind is FrameKind.FRAME and period.payload == PAYLOADS[i]
    s = path.stats
    assert (s.lost, s.recovered_red, s.concealed, s.recovered_fec) == (2, 2, 0, 0)
    assert (s.nacks_sent, s.seqs_nacked, s.nacks_cancelled) == (0, 0, 2)
    assert s.red_packets == s.received and s.red_late == 0
    assert s.underrun_periods == 0  # in time: the copies did not have to be waited for


# A burst of three is seen 60 ms after its first frame was due: a deeper buffer leaves the NACK
# of that frame time to be answered.
DEEP = {"min_frames": 4}


def test_a_burst_of_three_with_distance_two_rebuilds_two_and_nacks_one():
    path = ReceivePath(recorded(**DEEP))
    asked = run_red(path, red_stream(PAYLOADS, drop={40, 41, 42}), 90)
    nacked = [s for a in asked for s in a]
    assert set(nacked) == {seq_add(START, 40)}
    assert asked[next(i for i, a in enumerate(asked) if a)] == [seq_add(START, 40)]
    s = path.stats
    assert (s.lost, s.recovered_red) == (3, 2)
    by_seq = played_by_seq(path)
    assert [by_seq[seq_add(START, i)][0].kind for i in (41, 42)] == [FrameKind.FRAME] * 2
    assert by_seq[seq_add(START, 40)][0].kind in (FrameKind.FEC, FrameKind.PLC)  # no repair came


def test_a_retransmission_counts_as_nack_recovery():
    path = ReceivePath(recorded(**DEEP))
    packets = red_stream(PAYLOADS, drop={40, 41, 42})
    # the NACKed 40 comes back (as the gateway resends it: the RED packet unchanged)
    original = red_stream(PAYLOADS)[40]
    packets.append(replace(original, at=0.9))
    run_red(path, packets, 90)
    s = path.stats
    assert (s.lost, s.recovered_red, s.recovered_nack, s.concealed) == (3, 2, 1, 0)


def test_received_frames_are_never_played_twice():
    # every frame arrives, and every one also rides in the next two packets
    path = ReceivePath(recorded())
    run_red(path, red_stream(PAYLOADS), 90)
    frames = [p for p in path.played if p.kind is FrameKind.FRAME]
    assert [p.payload for p in frames] == PAYLOADS[: len(frames)]
    assert len({p.seq for p in frames}) == len(frames) > 80
    s = path.stats
    assert (s.lost, s.recovered_red, s.duplicate, s.red_late) == (0, 0, 0, 0)


def test_a_late_original_after_its_copy_is_a_duplicate_not_played_again():
    path = ReceivePath(recorded())
    packets = red_stream(PAYLOADS, delay={50: 0.030})  # overtaken by 51, whose copy fills it
    run_red(path, packets, 90)
    by_seq = played_by_seq(path)
    assert len(by_seq[seq_add(START, 50)]) == 1
    assert by_seq[seq_add(START, 50)][0].payload == PAYLOADS[50]
    s = path.stats
    assert (s.lost, s.recovered_red, s.reordered, s.duplicate, s.seqs_nacked) == (1, 1, 0, 1, 0)


def test_forty_ms_packets_are_rebuilt_at_their_duration():
    payloads = encode(speechy(2.0), 40)
    path = ReceivePath(recorded(**DEEP))  # two 40 ms packets: the oldest copy is 80 ms late
    sent = red_stream(payloads, 40, drop={20, 21})
    asked = run_red(path, sent, 100)
    assert [s for a in asked for s in a] == []
    by_seq = played_by_seq(path)
    assert [by_seq[seq_add(START, i)][0].payload for i in (20, 21)] == payloads[20:22]
    assert path.stats.recovered_red == 2 and path.stats.concealed == 0


def test_without_nack_red_keeps_a_frame_more_so_the_oldest_copy_is_in_time():
    path = ReceivePath(recorded(nack=False))
    path.red_payload_type = 63  # negotiated: reserved from the start
    assert path.jitter.min_frames == path.jitter.target_frames == 3
    run_red(path, red_stream(PAYLOADS, drop={30, 31, 60, 61}), 90)
    s = path.stats
    assert (s.recovered_red, s.concealed, s.red_late, s.underrun_periods) == (4, 0, 0, 0)
    # not negotiated up front: the floor rises with the first copies
    late = ReceivePath(recorded(nack=False))
    run_red(late, red_stream(PAYLOADS[:40]), 40)
    assert late.jitter.min_frames == 3
    held = ReceivePath(recorded(nack=False, red_reserve_frames=0))
    run_red(held, red_stream(PAYLOADS[:40]), 40)
    assert held.jitter.min_frames == 2  # no reserve: the floor stays


def test_a_copy_after_its_frame_was_played_as_lost_is_counted_late():
    # 30 and 31 lost, 32 held back: 33 comes first with copies of 31 and 32; 30's time has
    # passed by then (played out as an underrun); 32's copy of 30 comes too late for it
    path = ReceivePath(recorded(nack=False))
    run_red(path, red_stream(PAYLOADS, drop={30, 31}, delay={32: 0.080}), 90)
    s = path.stats
    assert (s.lost, s.recovered_red, s.red_late) == (3, 2, 1)
    assert s.duplicate == 1  # the held-back original of 32, already rebuilt from 33's copy
    by_seq = played_by_seq(path)
    assert seq_add(START, 30) not in by_seq
    assert [by_seq[seq_add(START, i)][0].payload for i in (31, 32)] == PAYLOADS[31:33]


def test_red_off_ignores_the_copies_and_malformed_red_is_dropped():
    path = ReceivePath(recorded(nack=False, red=False))
    packets = red_stream(PAYLOADS, drop={30})
    packets[10] = replace(packets[10], payload=b"\xff\x00")  # a header that runs past the end
    run_red(path, packets, 90)
    s = path.stats
    assert s.recovered_red == 0 and s.red_malformed == 1 and s.lost == 2
    assert s.recovered_fec + s.concealed == 2


@pytest.mark.parametrize("distance", [1, 3])
def test_other_distances(distance):
    path = ReceivePath(recorded(**DEEP))
    burst = set(range(30, 30 + distance))
    asked = run_red(path, red_stream(PAYLOADS, distance=distance, drop=burst), 90)
    assert [s for a in asked for s in a] == []
    assert path.stats.recovered_red == distance
