"""WHEP's ICE restart (PATCH + If-Match): new credentials both ways, the session lives on."""

from __future__ import annotations

import asyncio
import random

from aioice import stun

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient

FRAG = {"Content-Type": "application/trickle-ice-sdpfrag"}


def restart_frag(ufrag: str, pwd: str) -> str:
    return f"a=ice-ufrag:{ufrag}\r\na=ice-pwd:{pwd}\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"


async def binding(port: int, username: str, password: str) -> stun.Message:
    """One STUN Binding request to the gateway's host candidate, as a peer's check is."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[bytes] = loop.create_future()

    class Once(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr) -> None:
            if not answer.done():
                answer.set_result(data)

    transport, _ = await loop.create_datagram_endpoint(Once, local_addr=("127.0.0.1", 0))
    try:
        request = stun.Message(message_method=stun.Method.BINDING,
                               message_class=stun.Class.REQUEST)
        request.attributes["USERNAME"] = username
        request.attributes["PRIORITY"] = 1
        request.attributes["ICE-CONTROLLING"] = random.getrandbits(64)
        request.add_message_integrity(password.encode())
        request.add_fingerprint()
        transport.sendto(bytes(request), ("127.0.0.1", port))
        return stun.parse_message(await asyncio.wait_for(answer, 5))
    finally:
        transport.close()


async def test_ice_restart_with_if_match(gateway):
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    session = next(iter(gateway.registry))
    url = client.session_url
    try:
        etag = session.webrtc.etag
        new_ufrag, new_pwd = "rst1", "aNewPasswordOf22CharsPlus"
        async with gateway.http.patch(url, data=restart_frag(new_ufrag, new_pwd),
                                      headers=FRAG) as r:
            assert r.status == 428  # a restart needs If-Match
        async with gateway.http.patch(url, data=restart_frag(new_ufrag, new_pwd),
                                      headers={**FRAG, "If-Match": '"stale"'}) as r:
            assert r.status == 412 and r.headers["ETag"] == etag
        old_local = aiortc_compat.ice_credentials(session.webrtc._ice)[0]
        async with gateway.http.patch(url, data=restart_frag(new_ufrag, new_pwd),
                                      headers={**FRAG, "If-Match": '"*"'}) as r:
            assert r.status == 200 and r.content_type == "application/trickle-ice-sdpfrag"
            assert r.headers["ETag"] != etag
            frag = await r.text()
        lines = dict(line.split(":", 1) for line in frag.splitlines() if ":" in line)
        gw_ufrag, gw_pwd = lines["a=ice-ufrag"], lines["a=ice-pwd"]
        assert gw_ufrag != old_local[0]
        candidate = next(line for line in frag.splitlines() if line.startswith("a=candidate:"))
        port = int(candidate.split()[5])
        # the new credentials are what the gateway's ICE accepts now; the old ones are refused
        ok = await binding(port, f"{gw_ufrag}:{new_ufrag}", gw_pwd)
        assert ok.message_class == stun.Class.RESPONSE
        stale = await binding(port, f"{old_local[0]}:{new_ufrag}", old_local[1])
        assert stale.message_class == stun.Class.ERROR
        # the session lives on: media still flows, trickle still works without If-Match
        before = len(client.capture.packets)
        await client.capture.wait_packets(before + 10)
        async with gateway.http.patch(url, data="a=end-of-candidates\r\n", headers=FRAG) as r:
            assert r.status == 204
        assert session.webrtc.pc.connectionState == "connected"
    finally:
        await client.close()


async def test_a_failed_restart_leaves_the_session_as_it_was(gateway):
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    session = next(iter(gateway.registry))
    try:
        before = aiortc_compat.ice_credentials(session.webrtc._ice)
        async with gateway.http.patch(client.session_url, data=restart_frag("x", "short"),
                                      headers={**FRAG, "If-Match": "*"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "ice_restart_failed"
        assert aiortc_compat.ice_credentials(session.webrtc._ice) == before
        assert session.webrtc.ice_generation == 0
        n = len(client.capture.packets)
        await client.capture.wait_packets(n + 10)
    finally:
        await client.close()
