"""``--srtp-sender``: a session's outbound RTP protected in C (gateway/net/srtp_tx.py) or by
libsrtp, heard the same by a real aiortc client over loopback (its libsrtp decrypts every
packet, or it hears nothing), and said in /healthz."""

from __future__ import annotations

import asyncio

import pylibsrtp
import pytest

from gateway.aiortc_compat.dtls import TxSession
from gateway.client.peer import GatewayClient
from gateway.net import srtp_tx


async def hear(gateway, packets: int = 25) -> tuple[object, list]:  # type: ignore[no-untyped-def]
    """The gateway's outbound SRTP session and the client's decrypted packets."""
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    try:
        session = next(iter(gateway.registry))
        await asyncio.wait_for(session.webrtc.connected.wait(), 5)
        result = await client.say("hi", voice="tone")
        await client.wait_utterance(result.utterance["id"])
        await asyncio.wait_for(client.capture.wait_packets(packets), 5)
        transport = session.webrtc.pc.getTransceivers()[0].sender.transport
        return transport._tx_srtp, client.capture.ordered()
    finally:
        await client.close()


async def health(gateway) -> dict:  # type: ignore[no-untyped-def]
    async with gateway.http.get(f"{gateway.url}/healthz") as response:
        return await response.json()  # type: ignore[no-any-return]


@pytest.mark.skipif(srtp_tx.load() is None, reason="no compiler or libcrypto")
@pytest.mark.parametrize("profile", ["aiortc's first (AES-256-GCM)", "AES_CM_128_HMAC_SHA1_80"])
async def test_the_default_protects_in_c_and_the_client_hears_it(gateway, monkeypatch, profile):
    if profile.startswith("AES_CM"):  # what Chromium settles on: both peers offer only it
        import aiortc.rtcdtlstransport as dtls

        monkeypatch.setattr(dtls, "SRTP_PROFILES", [dtls.SRTP_AES128_CM_SHA1_80])
    assert (await health(gateway))["srtp_sender"] == {
        "mode": "c", "reason": "", "cipher": srtp_tx.cipher_path()}
    session, packets = await hear(gateway)
    assert type(session) is TxSession and session._gw_direct
    assert session._gw_profile == (1 if profile.startswith("AES_CM") else 8)
    seqs = [p.seq for p in packets]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # every packet decrypted
    assert any(p.payload != packets[0].payload for p in packets)  # speech, not only silence


@pytest.mark.skipif(srtp_tx.load() is None, reason="no compiler or libcrypto")
async def test_c_through_evp_on_request(start_gateway):
    """``--srtp-sender c-evp``: the C's state, every cipher call through EVP (the comparison
    for the direct calls); the client still hears every packet."""
    gateway = await start_gateway(srtp_sender="c-evp")
    assert (await health(gateway))["srtp_sender"] == {"mode": "c", "reason": "", "cipher": "evp"}
    session, packets = await hear(gateway)
    assert type(session) is TxSession and not session._gw_direct
    seqs = [p.seq for p in packets]
    assert len(seqs) >= 25 and seqs == list(range(seqs[0], seqs[0] + len(seqs)))


async def test_libsrtp_on_request(start_gateway):
    gateway = await start_gateway(srtp_sender="libsrtp")
    assert (await health(gateway))["srtp_sender"]["mode"] == "libsrtp"
    assert (await health(gateway))["srtp_sender"]["cipher"] == "libsrtp"
    session, packets = await hear(gateway)
    assert type(session) is pylibsrtp.Session
    assert len(packets) >= 25
