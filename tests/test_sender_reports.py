"""Sender reports from the shared tick (issue 28: per-session RTCP off tasks): a gateway session
has no RTCP task of aiortc's, yet a real aiortc receiver gets its SR + SDES -- the first after
0.5-1.5 s, then every ``--rtcp-report-interval-s`` varied by 0.5-1.5x (5 s by default, as
libwebrtc's audio) -- with the counters of what was sent, and the session still stops cleanly
(aiortc's BYE, its exited event)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import aiortc_compat
from gateway.webrtc.batch_sender import REPORT_INTERVAL_S

INTERVAL_S = 1.0  # this module's gateway (the default's 2.5-7.5 s would make the tests slow)


@pytest.fixture
async def gateway(start_gateway):
    return await start_gateway(rtcp_report_interval_s=INTERVAL_S)


async def connected_session(gateway):
    session = next(iter(gateway.registry))
    await asyncio.wait_for(session.webrtc.connected.wait(), timeout=5)
    return session


def remote_outbound(stats) -> list:
    return [s for s in stats.values() if s.type == "remote-outbound-rtp"]


async def test_reports_reach_an_aiortc_receiver_without_a_task_per_session(connect, gateway):
    client = await connect()
    session = await connected_session(gateway)
    sender = session.webrtc.pc.getTransceivers()[0].sender
    rtcp_loop = sender._RTCRtpSender__rtcp_task
    assert not isinstance(rtcp_loop, asyncio.Task)  # parked: a future, no task
    assert not [t for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__qualname__", "") == "RTCRtpSender._run_rtcp"
                and t.get_coro().cr_frame.f_locals.get("self") is sender]
    stats = session.webrtc.sink.stats
    result = await client.say("hi", voice="tone")
    await client.wait_utterance(result.utterance["id"])
    before = stats.sender_reports
    await asyncio.sleep(3.2)
    reports = stats.sender_reports - before
    # every 0.5-1.5 s: 2 to 7 reports in 3.2 s (the first may come just after the start)
    assert 3.2 / (1.5 * INTERVAL_S) - 1 <= reports <= 3.2 / (0.5 * INTERVAL_S) + 1
    seen = remote_outbound(await client.transceiver.receiver.getStats())
    assert seen, "the client's receiver got no sender report"
    session.webrtc.transmitter.settle()  # (the counters of what C sent, brought up to date)
    report = seen[0]
    assert report.ssrc == aiortc_compat.sender_ssrc(sender)
    # the counters are what was sent by the report's time: at most what is sent by now, and
    # fresh (a report leaves every 1.5 s at most: 75 frames; 3 s of slack for a busy machine)
    assert 0 < report.packetsSent <= stats.frames_sent
    assert report.packetsSent >= stats.frames_sent - 3 * 50
    assert report.bytesSent > 0
    await client.close()
    await asyncio.wait_for(session.closed.wait(), timeout=5)
    assert sender._RTCRtpSender__rtcp_exited.is_set()  # aiortc's stop did not hang
    assert "_run_rtcp" not in vars(sender)  # teardown took our replacement off the sender


async def test_by_default_the_first_report_goes_soon_and_the_next_after_libwebrtcs_interval(
        start_gateway):
    """The first report after 0.5-1.5 s (the receiver's clock mapping, our RTT), then none for
    at least 2.5 s: libwebrtc's 5 s audio interval varied by 0.5-1.5x, not aiortc's 1 s."""
    from gateway.client.peer import GatewayClient

    assert REPORT_INTERVAL_S == 5.0
    running = await start_gateway()
    client = GatewayClient(running.url, running.http)
    await client.connect()
    try:
        session = await connected_session(running)
        assert session.webrtc.transmitter.report_interval_s == REPORT_INTERVAL_S
        stats = session.webrtc.sink.stats
        for _ in range(100):  # (a counter on the gateway's loop: no event to wait on)
            if stats.sender_reports:
                break
            await asyncio.sleep(0.05)
        assert stats.sender_reports == 1
        await asyncio.sleep(2.2)  # (the next one comes 2.5 s after the first at the soonest)
        assert stats.sender_reports == 1
        seen = remote_outbound(await client.transceiver.receiver.getStats())
        assert seen, "the client's receiver got no sender report"
    finally:
        await client.close()


async def test_a_session_closed_before_it_connects_stops_cleanly(gateway):
    """Parked before aiortc ever started the sender: closing touches nothing of ours."""
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # no STUN: loopback only
    pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=pc.localDescription.sdp,
                                 headers={"Content-Type": "application/sdp"}) as response:
        assert response.status == 201
        location = response.headers["Location"]
    session = next(iter(gateway.registry))
    assert "_run_rtcp" in vars(session.webrtc.pc.getTransceivers()[0].sender)
    async with gateway.http.delete(f"{gateway.url}{location}") as response:
        assert response.status == 204
    await asyncio.wait_for(session.closed.wait(), timeout=5)
    assert "_run_rtcp" not in vars(session.webrtc.pc.getTransceivers()[0].sender)
    await pc.close()


async def test_report_times_keep_to_the_grain_so_many_streams_share_a_tick(
        connect, gateway, monkeypatch):
    """Every report is due on a multiple of ``REPORT_GRAIN_S`` and runs after its tick's sends:
    1,000 streams' reports then go in ten batches a second, not one cold visit each."""
    from gateway.media.ticker import shared_ticker
    from gateway.webrtc import batch_sender

    ticker = shared_ticker()
    asked: list[float] = []
    after_sends = ticker.call_after_sends

    def spy(t, callback):
        if getattr(callback, "func", None) is batch_sender._report_if_alive:
            asked.append(t)
        after_sends(t, callback)

    monkeypatch.setattr(ticker, "call_after_sends", spy)
    await connect()
    session = await connected_session(gateway)
    before = session.webrtc.sink.stats.sender_reports
    await asyncio.sleep(2.5)
    assert session.webrtc.sink.stats.sender_reports > before
    assert len(asked) >= 2
    grain = batch_sender.REPORT_GRAIN_S
    assert all(abs(t / grain - round(t / grain)) < 1e-6 for t in asked), asked


async def test_the_report_is_aiortcs_byte_for_byte(connect, gateway):
    """``sender_report`` packs the SR itself and serialises the SDES once a sender: the bytes
    are aiortc's packet objects', counters past 32 bits and a CNAME changed or gone too."""
    await connect()
    session = await connected_session(gateway)
    sender = session.webrtc.pc.getTransceivers()[0].sender
    p = "_RTCRtpSender__"
    cases = [(0, 0, 0, 0), (0xFEDCBA9876543210, 0xFFFFFFFF, (1 << 40) + 7, (1 << 33) + 5),
             (1 << 63, 12345, 0xFFFFFFFF, 0)]
    for cname in (getattr(sender, p + "cname"), "other-cname", None):
        setattr(sender, p + "cname", cname)
        for ntp, ts, packets, octets in cases:
            for name, value in (("ntp_timestamp", ntp), ("rtp_timestamp", ts),
                                ("packet_count", packets), ("octet_count", octets)):
                setattr(sender, p + name, value)
            expected = aiortc_compat.aiortc_sender_report(sender)
            assert aiortc_compat.sender_report(sender) == expected
            assert getattr(sender, p + "lsr") == (ntp >> 16) & 0xFFFFFFFF
            assert (len(expected) == 28) == (cname is None)  # the SR alone: no SDES
