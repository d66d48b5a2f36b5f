"""Fails loudly when an aiortc/aioice upgrade moves a private name the gateway relies on."""

import aioice.ice
import aiortc
import pytest
from aiortc import RTCPeerConnection

from gateway import aiortc_compat


def test_aiortc_is_the_pinned_series():
    assert aiortc.__version__.startswith("1.16."), aiortc.__version__


def test_every_private_name_still_exists():
    assert aiortc_compat.check_internals() == []


async def test_history_replacement_reaches_the_sender_only():
    import aiortc.rtcrtpsender

    size = aiortc.rtcrtpsender.RTP_HISTORY_SIZE
    pc = RTCPeerConnection()
    transceiver = pc.addTransceiver("audio", direction="sendonly")
    other = pc.addTransceiver("audio", direction="sendonly")
    history: dict[int, object] = {}
    aiortc_compat.install_sender_history(transceiver.sender, history)
    assert aiortc_compat.sender_history(transceiver.sender) is history
    # scoped to that sender: aiortc's process-wide size and every other sender's history stay
    assert aiortc.rtcrtpsender.RTP_HISTORY_SIZE == size == 128
    assert aiortc_compat.sender_history(other.sender) is not history
    assert aiortc_compat.negotiated_codecs(transceiver) == []
    await pc.close()


def test_ice_host_restriction_round_trip():
    aiortc_compat.restrict_ice_hosts(["127.0.0.1", "::1"])
    assert aioice.ice.get_host_addresses(True, False) == ["127.0.0.1"]
    assert aioice.ice.get_host_addresses(True, True) == ["127.0.0.1", "::1"]
    aiortc_compat.restrict_ice_hosts(None)
    assert aioice.ice.get_host_addresses is aiortc_compat._original_get_host_addresses
    with pytest.raises(ValueError):
        aiortc_compat.restrict_ice_hosts(["not-an-ip"])


def test_missing_attribute_raises_a_clear_error():
    with pytest.raises(RuntimeError, match="aiortc internals moved"):
        aiortc_compat.install_sender_history(object(), {})  # type: ignore[arg-type]


async def test_batch_path_reaches_the_senders_internals():
    pc = RTCPeerConnection()
    transceiver = pc.addTransceiver("audio", direction="sendonly")
    sender = transceiver.sender
    mid, extensions = aiortc_compat.sender_rtp_context(sender)
    assert mid is None and extensions is not None  # configured when the sender starts
    aiortc_compat.note_rtp_sent(sender, rtp_timestamp=960, ntp_timestamp=1, octets=40)
    aiortc_compat.note_rtp_sent(sender, rtp_timestamp=1920, ntp_timestamp=2, octets=40)
    assert sender._RTCRtpSender__packet_count == 2
    assert sender._RTCRtpSender__octet_count == 80
    assert sender._RTCRtpSender__rtp_timestamp == 1920
    assert aiortc_compat.direct_rtp_sender(sender.transport) is None  # not connected
    assert 0 <= aiortc_compat.first_sequence_number() <= 0xFFFF
    await pc.close()


async def test_shared_socket_gathering_fails_loudly_without_its_internals():
    class NotAPeerConnection:
        pass

    with pytest.raises(RuntimeError, match="aiortc internals moved"):
        aiortc_compat.share_udp_socket(NotAPeerConnection(), lambda host: None)  # type: ignore[arg-type]


async def test_shared_socket_gathering_advertises_the_shared_port():
    from aiortc import RTCSessionDescription

    from gateway.net.udp_mux import UdpMux

    aiortc_compat.restrict_ice_hosts(["127.0.0.1"])
    mux = await UdpMux.bind("127.0.0.1", 0)
    offerer, answerer = RTCPeerConnection(), RTCPeerConnection()
    try:
        offerer.addTransceiver("audio", direction="recvonly")
        await offerer.setLocalDescription(await offerer.createOffer())
        await answerer.setRemoteDescription(offerer.localDescription)
        assert aiortc_compat.share_udp_socket(answerer, lambda host: mux) == 1
        assert aiortc_compat.uses_udp_mux(answerer) and not aiortc_compat.uses_udp_mux(offerer)
        await answerer.setLocalDescription(await answerer.createAnswer())
        ports = {line.split()[5] for line in answerer.localDescription.sdp.splitlines()
                 if line.startswith("a=candidate:")}
        assert ports == {str(mux.local_address[1])}
        assert mux.stats.endpoints == 1 and mux.entries["ufrags"] == 1
        await offerer.setRemoteDescription(
            RTCSessionDescription(answerer.localDescription.sdp, "answer"))
    finally:
        await offerer.close()
        await answerer.close()
        aiortc_compat.restrict_ice_hosts(None)
    assert mux.stats.endpoints == 0 and mux.entries["ufrags"] == 0
    mux.close()


def test_an_aioice_that_replaces_its_nominated_dict_is_reported(monkeypatch):
    """``NominatedPairs`` watches the dict aioice keeps: a method storing another one would
    silently stop it telling a stream sent from C that its pair moved."""

    def restart(self) -> None:
        self._nominated = {}

    assert aiortc_compat.sender._nominated_problems() == []
    monkeypatch.setattr(aioice.ice.Connection, "restart_for_test", restart, raising=False)
    assert aiortc_compat.sender._nominated_problems() == [
        "aioice.Connection.restart_for_test assigns _nominated"]


def test_nominated_pairs_tell_a_change_once():
    told = []

    class Stream:
        def path_moved(self) -> None:
            told.append(1)

    import weakref

    stream = Stream()
    pairs = aiortc_compat.NominatedPairs({1: "a"})
    pairs.moved = weakref.ref(stream)
    pairs[1] = "a"  # the same pair again: nothing moved
    assert told == []
    pairs[1] = "b"
    pairs.clear()
    assert len(told) == 2
    del stream  # (held weakly: a stream gone is not called)
    pairs[1] = "c"
    assert len(told) == 2
