"""bench/floor.py's floor at a fan-out: real datagrams to N sockets a drainer process reads.

Asserts what the machinery did (every datagram protected, sent and read; the split adds up),
never a speed: the figures themselves belong to the bench's output.
"""

from __future__ import annotations

import pytest

from bench import floor
from gateway.net import sendmmsg


def test_the_fanout_floor_sends_every_stream_its_packets_and_the_drainer_reads_them():
    if not sendmmsg.available():
        pytest.skip("no sendmmsg here: the fan-out floor is not measured")
    split = floor.measure_fanout(24, 0.2, None)
    assert split["read_share"] == 1.0  # 24 streams x 10 frames, each read once
    assert split["sendmmsg_fanout"] > 0 and split["srtp_fanout"] > 0
    assert split["floor_fanout"] == pytest.approx(split["sendmmsg_fanout"]
                                                  + split["srtp_fanout"])


def test_the_fanout_floor_from_c_sends_and_protects_every_packet():
    split = floor.measure_fanout_c(24, 0.2, None)
    if split is None:
        pytest.skip("the C floor does not build here (no compiler)")
    assert split["read_share"] == 1.0
    assert split["sendmmsg_fanout"] > 0 and split["srtp_fanout"] > 0
    hot = floor.measure_fanout_c(24, 0.2, None, paced=False, one_destination=True)
    assert hot is not None and hot["read_share"] > 0


def test_the_fanout_floor_protects_with_the_cipher_aiortc_peers_negotiate():
    from aiortc.rtcdtlstransport import SRTP_PROFILES

    assert SRTP_PROFILES[0].openssl_profile.startswith(b"SRTP_AEAD_AES_")
    packet = floor.rtp_packet(1)
    protected = floor.gcm_session().protect(packet)
    assert len(protected) == len(packet) + 16  # GCM's tag, not HMAC-SHA1-80's 10 bytes


def test_the_veth_floor_sends_across_its_namespaces_and_removes_them():
    """bench/veth_floor.py (and ``bench.load --veth``): the drainer in the far namespace reads
    every datagram sent from the near one, this process comes back to its own namespace, and
    both namespaces are gone afterwards."""
    import os
    import subprocess

    from bench import veth_floor

    if not veth_floor.available():
        pytest.skip("needs root and iproute2's ip")
    home = os.readlink(f"/proc/{os.getpid()}/ns/net")
    with veth_floor.veth_pair(0, 0):
        floor.drain_at(veth_floor.RX_IP, veth_floor.RX)
        try:
            with veth_floor.sending_from():
                assert os.readlink(f"/proc/{os.getpid()}/ns/net") != home
                split = floor.measure_fanout_c(24, 0.2, None)
        finally:
            floor.drain_at()
    assert os.readlink(f"/proc/{os.getpid()}/ns/net") == home
    if split is None:
        pytest.skip("the C floor does not build here (no compiler)")
    assert split["read_share"] == 1.0
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert veth_floor.TX not in listed and veth_floor.RX not in listed


def test_the_compiled_tick_alone_sends_every_parked_streams_slots():
    """bench/parked_path.py: 24 streams parked on the compiled send path, each slot due on
    its tick staged, protected, sent and read by the drainer; a figure for each call."""
    from bench import parked_path
    from gateway.net import sendpath

    if sendpath.load() is None:
        pytest.skip("the compiled send path does not build here (no compiler)")
    runs = parked_path.run(24, 1, 0.2, None, 0)
    assert runs["sent"] >= 24 * 10  # 0.2 s of 20 ms slots, and the warm-up round's
    assert runs["received"] == runs["sent"]
    assert len(runs["run_parked"]) == 1 and runs["run_parked"][0] > 0
    assert len(runs["flush"]) == 1 and runs["flush"][0] > 0
