"""Issue 23, nothing heavy on the event loop: offers and trickle PATCHes over the SDP limits
are a 400 naming the limit, answered at once; ``.local`` candidates cost nothing; a session's
remote candidates are capped. Every candidate here is on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

from tests.abuse_probe import LoopStall
from tests.test_api import CHROMIUM

SDP = {"Content-Type": "application/sdp"}
FRAG = {"Content-Type": "application/trickle-ice-sdpfrag"}


def with_lines(offer: str, lines: list[str]) -> str:
    """``offer`` with ``lines`` added at the end of its (only) m-section."""
    return offer.rstrip("\r\n") + "\n" + "".join(f"{line}\n" for line in lines)


def candidate(i: int, host: str = "127.0.0.1", port: int | None = None) -> str:
    return f"a=candidate:{i} 1 udp {2122260223 - i} {host} {port or 40000 + i % 20000} typ host"


async def refused(gateway, method: str, url: str, body: str, headers: dict) -> dict:
    async with LoopStall() as stall:
        started = time.monotonic()
        async with gateway.http.request(method, url, data=body, headers=headers) as r:
            answer = await r.json()
            status = r.status
        took = time.monotonic() - started
    assert status == 400, answer
    assert answer["error"]["code"] == "sdp_limit"
    # before: 32.6 s (46,000 ssrc lines), 70.8 s (12,000 candidates) with the loop frozen
    assert stall.worst_s < 1.0 and took < 2.0, (stall.worst_s, took)
    return answer["error"]


async def test_an_offer_with_46000_ssrc_lines_is_refused_at_once(gateway):
    ssrc = [f"a=ssrc:{1000 + i} c:{i}" for i in range(46_000)]  # the 978 KB of the issue
    body = with_lines(CHROMIUM, ssrc)
    assert len(body) < 1 << 20  # under the body limit: the SDP limit is what refuses it
    error = await refused(gateway, "POST", f"{gateway.url}/v1/sessions", body, SDP)
    assert "max_ssrc_lines" in error["message"]


async def test_offers_over_the_other_limits_are_refused_naming_them(gateway):
    url = f"{gateway.url}/v1/sessions"
    cases = {
        "max_candidates": with_lines(CHROMIUM, [candidate(i) for i in range(6000)]),
        "max_line_chars": with_lines(CHROMIUM, ["a=x-long:" + "y" * 5000]),
        "max_attributes": with_lines(CHROMIUM, [f"a=x-{i}" for i in range(3000)]),
        "max_media_sections": CHROMIUM + "".join(
            f"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:{i}\r\n" for i in range(1, 20)),
    }
    for limit, body in cases.items():
        error = await refused(gateway, "POST", url, body, SDP)
        assert limit in error["message"], (limit, error)


async def test_the_chromium_offers_pass_the_default_limits(gateway):
    for name in ("chromium-156-recvonly", "chromium-156-sendrecv-mic"):
        from tests.test_api import SAMPLES
        offer = (SAMPLES / f"{name}.offer.sdp").read_text()
        async with gateway.http.post(f"{gateway.url}/v1/sessions", data=offer,
                                     headers=SDP) as r:
            assert r.status == 201, await r.text()
            location = gateway.url + r.headers["Location"]
        async with gateway.http.delete(location) as r:
            assert r.status == 204


async def session(gateway) -> str:
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=CHROMIUM, headers=SDP) as r:
        assert r.status == 201
        return gateway.url + r.headers["Location"]


async def test_a_patch_of_12000_candidates_is_refused_at_once(gateway):
    location = await session(gateway)
    frag = "a=mid:0\r\n" + "".join(candidate(i) + "\r\n" for i in range(12_000))
    error = await refused(gateway, "PATCH", location, frag, FRAG)
    assert "max_candidates" in error["message"]


async def test_a_sessions_candidates_are_capped_across_patches(start_gateway):
    gateway = await start_gateway(max_remote_candidates=10)
    location = await session(gateway)  # the offer's own candidate counts
    statuses = []
    for batch in range(4):
        frag = "a=mid:0\r\n" + "".join(
            candidate(batch * 4 + i) + "\r\n" for i in range(4))
        async with gateway.http.patch(location, data=frag, headers=FRAG) as r:
            statuses.append(r.status)
    assert statuses == [204, 204, 400, 400], statuses


async def test_mdns_candidates_are_ignored_not_resolved(gateway):
    location = await session(gateway)
    frag = "a=mid:0\r\n" + "".join(
        candidate(i, host=f"{i:08x}-1111-2222-3333-444455556666.local") + "\r\n"
        for i in range(20))
    async with LoopStall() as stall:
        started = time.monotonic()
        async with gateway.http.patch(location, data=frag, headers=FRAG) as r:
            assert r.status == 204
        took = time.monotonic() - started
    assert took < 1.0, f"{took:.1f} s (before: 1 s per .local candidate, in turn)"
    assert stall.worst_s < 1.0


async def test_two_identical_m_sections_are_a_400_not_a_500(gateway):
    lines = CHROMIUM.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("m="))
    offer = "\n".join(lines + lines[start:]) + "\n"  # the audio section twice, same mid
    async with gateway.http.post(f"{gateway.url}/v1/sessions", data=offer, headers=SDP) as r:
        assert r.status == 400, await r.text()
        assert (await r.json())["error"]["code"]


class _Counter(asyncio.DatagramProtocol):
    """One of the test's own UDP sockets on 127.0.0.1: counts the STUN binding requests."""

    def __init__(self, arrivals: list[tuple[float, int]]) -> None:
        self.arrivals = arrivals

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.port = transport.get_extra_info("sockname")[1]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if data[:2] == b"\x00\x01":  # a STUN Binding request
            self.arrivals.append((time.monotonic(), self.port))


async def test_stun_checks_toward_named_addresses_are_paced_and_capped(start_gateway):
    per_s = 10.0
    gateway = await start_gateway(stun_checks_per_s=per_s, max_remote_candidates=64)
    loop = asyncio.get_running_loop()
    arrivals: list[tuple[float, int]] = []
    # aioice checks each transport address once: 60 addresses of the test's own
    sockets = [await loop.create_datagram_endpoint(lambda: _Counter(arrivals),
                                                   local_addr=("127.0.0.1", 0))
               for _ in range(60)]
    try:
        ports = [transport.get_extra_info("sockname")[1] for transport, _ in sockets]
        location = await session(gateway)
        # 3,000 candidates (the attack): refused past the per-session cap...
        frag = "a=mid:0\r\n" + "".join(
            candidate(i, port=ports[i % 60]) + "\r\n" for i in range(3000))
        async with gateway.http.patch(location, data=frag, headers=FRAG) as r:
            assert r.status == 400
        # ... and the 60 that fit are checked at the session's pace
        frag = "a=mid:0\r\n" + "".join(
            candidate(i, port=port) + "\r\n" for i, port in enumerate(ports))
        async with gateway.http.patch(location, data=frag, headers=FRAG) as r:
            assert r.status == 204
        sent = time.monotonic()
        await asyncio.sleep(2.0)
    finally:
        for transport, _ in sockets:
            transport.close()
    checked = {port for t, port in arrivals if t - sent < 1.0}  # new checks: one per address
    # unpaced: a new check every 20 ms, ≈50 addresses in the first second (71 packets)
    assert 0 < len(checked) <= 2 * per_s + 1, len(checked)  # a burst of per_s, then per_s/s
    assert len(arrivals) <= 64 * 7  # each candidate: a check and 6 retransmissions at most
