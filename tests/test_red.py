"""RFC 2198 RED from the pre-encoded frames: negotiated when offered, each packet carrying the
previous frames byte for byte, adaptive to reported loss, resent unchanged (real aiortc peers)."""

from __future__ import annotations

import asyncio
import re

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from gateway import aiortc_compat
from gateway.nack.rtcp import build_nack_packet
from gateway.rtp import red

RED_PT = 63


def with_red(offer: str, opus_pt: int) -> str:
    """The offer as Chromium makes it: red/48000/2 over Opus (aiortc itself offers no RED)."""
    offer = re.sub(r"(m=audio [^\r\n]*)", lambda m: f"{m[1]} {RED_PT}", offer, count=1)
    return offer.replace(
        f"a=rtpmap:{opus_pt} opus/48000/2\r\n",
        f"a=rtpmap:{opus_pt} opus/48000/2\r\na=rtpmap:{RED_PT} red/48000/2\r\n"
        f"a=fmtp:{RED_PT} {opus_pt}/{opus_pt}\r\n",
    )


async def listen(gateway, packets: list) -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    transceiver = pc.addTransceiver("audio", direction="recvonly")
    aiortc_compat.tap_rtp(transceiver.receiver, lambda p, t: packets.append(p))
    await pc.setLocalDescription(await pc.createOffer())
    opus_pt = int(re.search(r"a=rtpmap:(\d+) opus/48000/2", pc.localDescription.sdp)[1])
    offer = with_red(pc.localDescription.sdp, opus_pt)
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=offer,
                                 headers={"Content-Type": "application/sdp"}) as r:
        assert r.status == 201, await r.text()
        answer = await r.text()
        location = gateway.url + r.headers["Location"]
    assert f"a=rtpmap:{RED_PT} red/48000/2" in answer
    await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
    aiortc_compat.accept_payload_type(transceiver.receiver, RED_PT)  # aiortc knows no RED
    return pc, location


async def wait_for(packets: list, predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"{len(packets)} packets"
        await asyncio.sleep(0.02)  # packets arrive on their own 20 ms schedule


async def test_red_carries_the_previous_frames_byte_identical(start_gateway):
    gateway = await start_gateway(red_distance=2, red_adaptive=False)
    packets: list = []
    pc, location = await listen(gateway, packets)
    try:
        async with gateway.http.post(f"{location}/speech",
                                     json={"text": "hi", "voice": "tone"}) as r:
            assert r.status == 202
        await wait_for(packets, lambda: len(packets) >= 40)
        ordered = sorted(packets[5:40], key=lambda p: p.sequence_number)
        assert {p.payload_type for p in ordered} == {RED_PT}
        primaries = {p.timestamp: red.decode(p.payload)[-1].data for p in ordered}
        checked = 0
        for p in ordered:
            blocks = red.decode(p.payload)
            assert [b.timestamp_offset for b in blocks] == [1920, 960, 0]
            for block in blocks[:-1]:
                earlier = primaries.get((p.timestamp - block.timestamp_offset) & 0xFFFFFFFF)
                if earlier is not None:
                    assert block.data == earlier  # byte for byte what was sent before
                    checked += 1
        assert checked > 40
        async with gateway.http.get(location) as r:
            state = await r.json()
        assert state["red"]["red_packets"] >= 40 and 0.5 < state["red"]["overhead"] < 2.5
    finally:
        await pc.close()


async def test_adaptive_red_starts_with_reported_loss_and_resends_are_unchanged(gateway):
    packets: list = []
    pc, location = await listen(gateway, packets)
    try:
        await wait_for(packets, lambda: len(packets) >= 20)
        assert {p.payload_type for p in packets} != {RED_PT}  # a clean link: plain Opus
        ssrc = packets[0].ssrc
        receiver = pc.getTransceivers()[0].receiver
        lost = packets[-1].sequence_number
        await aiortc_compat.send_unprotected(receiver.transport, build_nack_packet(1, ssrc, [lost]))
        await wait_for(packets, lambda: packets[-1].payload_type == RED_PT)
        async with gateway.http.get(location) as r:
            state = await r.json()
        assert state["red"]["active"] and state["red"]["activations"] == 1
        # a RED packet is resent as it was sent (the store rebuilds it under RED's header)
        session = next(iter(gateway.registry))
        red_seq = packets[-1].sequence_number
        stored = session.webrtc.store.lookup(red_seq)
        assert stored.red and stored.packet[1] & 0x7F == RED_PT
        assert red.primary(stored.payload) == red.primary(packets[-1].payload)
    finally:
        await pc.close()


def test_red_max_distance_flag_and_environment(monkeypatch):
    from gateway.config import parse_config

    assert parse_config([]).red_max_distance == 0  # off: the distance stays what it is
    config = parse_config(["--red-max-distance", "6"])
    assert config.red_max_distance == 6 and config.session_options().red_max_distance == 6
    monkeypatch.setenv("GATEWAY_RED_MAX_DISTANCE", "4")
    assert parse_config([]).red_max_distance == 4


async def test_nacked_bursts_raise_the_distance_up_to_red_max_distance(start_gateway):
    gateway = await start_gateway(red_distance=2, red_max_distance=4, red_adaptive=False)
    packets: list = []
    pc, location = await listen(gateway, packets)
    try:
        await wait_for(packets, lambda: len(packets) >= 20)
        assert len(red.decode(packets[-1].payload)) == 3  # distance 2: two copies + primary
        async with gateway.http.get(location) as r:
            assert (await r.json())["red"]["max_distance"] == 4
        last = packets[-1].sequence_number
        burst = [(last - 9 + i) & 0xFFFF for i in range(6)]  # a run of 6: a burst of 6
        receiver = pc.getTransceivers()[0].receiver
        await aiortc_compat.send_unprotected(
            receiver.transport, build_nack_packet(1, packets[0].ssrc, burst))
        await wait_for(packets, lambda: len(red.decode(packets[-1].payload)) == 5)  # 4 + 1
        async with gateway.http.get(location) as r:
            state = (await r.json())["red"]
        assert state["distance_now"] == 4 and state["distance_raises"] == 1
    finally:
        await pc.close()
