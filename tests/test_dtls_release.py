"""The gateway frees OpenSSL's DTLS state once connected (≈100 KB a session), and nothing a peer
can see changes: media flows, either side's close reaches the other (gateway_compat)."""

from __future__ import annotations

import asyncio

import pytest

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient


async def gateway_transport(gateway):
    """The session and its DTLS transport, once the gateway's side is connected too (the
    listener, as DTLS server, finishes the handshake first)."""
    session = next(iter(gateway.registry))
    await asyncio.wait_for(session.webrtc.connected.wait(), timeout=5)
    return session, session.webrtc.pc.getTransceivers()[0].sender.transport


async def test_released_after_connect_and_media_still_flows(connect, gateway):
    client = await connect()
    session, transport = await gateway_transport(gateway)
    assert session.webrtc.dtls_released and aiortc_compat.dtls_released(transport)
    assert (await client.state())["dtls_released"] is True
    before = len(client.capture.ordered())
    result = await client.say("hi", voice="tone")
    done = await client.wait_utterance(result.utterance["id"])
    assert done["state"] == "done"
    assert len(client.capture.ordered()) >= before + 50  # the utterance's 50 frames arrived


async def test_gateway_side_close_still_sends_close_notify(gateway):
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    _session, transport = await gateway_transport(gateway)
    assert aiortc_compat.dtls_released(transport)
    async with gateway.http.delete(client.session_url) as response:  # the gateway closes
        assert response.status == 204
    # The listener learns it from the close_notify prepared at release time (not from ICE
    # consent, which would take far longer than this timeout).
    await asyncio.wait_for(client._failed.wait(), timeout=5)
    assert client.pc.connectionState == "closed"
    await client.close(delete=False)


async def test_peer_side_close_reaches_the_released_gateway(gateway):
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session, transport = await gateway_transport(gateway)
    assert aiortc_compat.dtls_released(transport)
    await client.close(delete=False)  # aiortc sends close_notify: an alert record
    await asyncio.wait_for(session.closed.wait(), timeout=5)
    assert session.close_reason.startswith("peer connection")


async def test_kept_when_disabled(start_gateway):
    from gateway.config import GatewayConfig

    assert GatewayConfig().release_dtls
    gateway = await start_gateway(release_dtls=False)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect()
    session, transport = await gateway_transport(gateway)
    assert not session.webrtc.dtls_released and not aiortc_compat.dtls_released(transport)
    await client.close()


async def test_release_refuses_a_transport_that_is_not_connected():
    from aiortc import RTCPeerConnection

    pc = RTCPeerConnection()
    transceiver = pc.addTransceiver("audio", direction="sendonly")
    with pytest.raises(RuntimeError):  # no DTLS transport internals on a plain object
        aiortc_compat.release_dtls(object())  # type: ignore[arg-type]
    assert aiortc_compat.release_dtls(transceiver.sender.transport) is False
    await pc.close()
