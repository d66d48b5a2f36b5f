"""One UDP socket per worker (issue 16): every session's ICE, DTLS and SRTP on the shared port,
real aiortc peers on 127.0.0.1 over real UDP."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import aioice.stun
import pytest
from aiortc import sdp as aiortc_sdp

from gateway import aiortc_compat
from gateway.client.peer import GatewayClient
from gateway.net import stun_fields
from gateway.net.udp_mux import MAX_UFRAGS_PER_ENDPOINT, UdpMux

N_SESSIONS = 6


def udp_sockets_of_this_process() -> list[int]:
    """Local ports of this process's UDP sockets (/proc/self/fd against /proc/net/udp[6])."""
    ports: dict[str, int] = {}
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                ports[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and (inode := link[8:-1]) in ports:
            found.append(ports[inode])
    return found


def gateway_candidate_ports(client: GatewayClient) -> set[int]:
    """The ports of the host candidates in the gateway's answer."""
    sdp = client.pc.remoteDescription.sdp
    return {aiortc_sdp.candidate_from_sdp(line.split(":", 1)[1]).port
            for line in sdp.splitlines() if line.startswith("a=candidate:")}


def mux_of(gateway: Any) -> UdpMux:
    group = gateway.registry.udp_mux
    assert group is not None and len(group.muxes) == 1
    return next(iter(group.muxes.values()))


async def connect_many(gateway: Any, n: int) -> list[GatewayClient]:
    clients = [GatewayClient(gateway.url, gateway.http, capture=True) for _ in range(n)]
    await asyncio.gather(*(c.connect() for c in clients))
    return clients


async def test_sessions_share_one_port_and_all_get_media(gateway):
    before = udp_sockets_of_this_process()
    clients = await connect_many(gateway, N_SESSIONS)
    try:
        mux = mux_of(gateway)
        port = mux.local_address[1]
        for client in clients:
            assert gateway_candidate_ports(client) == {port}
        # every session's stream arrives (silence keeps each flowing), each its own SSRC
        await asyncio.gather(*(c.capture.wait_packets(10) for c in clients))
        assert len({c.capture.ordered()[0].ssrc for c in clients}) == N_SESSIONS
        result = await clients[2].say("A tone please.", voice="tone")
        state = await clients[2].wait_utterance(result.utterance["id"])
        assert state["state"] == "done" and state["frames_sent"] == 50
        # the gateway's side of N sessions: one UDP socket; the clients' sockets are their own
        after = udp_sockets_of_this_process()
        assert after.count(port) == 1
        assert len(after) - len(before) == N_SESSIONS  # the clients' N: no gateway socket added
        assert mux.stats.endpoints == N_SESSIONS
        assert mux.entries["ufrags"] == N_SESSIONS
        assert mux.entries["addresses"] == N_SESSIONS  # every client from one address
        assert mux.stats.batches > 0 and mux.stats.batched > mux.stats.batches
    finally:
        for client in clients:
            await client.close()
    await wait_for(lambda: mux.stats.endpoints == 0)
    assert mux.entries == {"ufrags": 0, "addresses": 0,
                           "transactions": mux.entries["transactions"]}
    assert mux.stats.addresses == 0


async def test_without_the_mux_each_session_binds_its_own_socket(start_gateway):
    gateway = await start_gateway(udp_mux=False)
    before = udp_sockets_of_this_process()
    clients = await connect_many(gateway, 3)
    try:
        assert gateway.registry.udp_mux is None
        assert len(udp_sockets_of_this_process()) - len(before) == 2 * 3
        await asyncio.gather(*(c.capture.wait_packets(5) for c in clients))
    finally:
        for client in clients:
            await client.close()


async def test_fixed_port_is_the_one_advertised(start_gateway):
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    gateway = await start_gateway(udp_port=port)
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    try:
        await client.connect()
        assert gateway_candidate_ports(client) == {port}
        await client.capture.wait_packets(5)
    finally:
        await client.close()


class Stray(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received: list[bytes] = []

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.received.append(data)


async def test_stray_datagrams_are_dropped_and_counted(gateway):
    clients = await connect_many(gateway, 2)
    try:
        mux = mux_of(gateway)
        loop = asyncio.get_running_loop()
        transport, stray = await loop.create_datagram_endpoint(
            Stray, local_addr=("127.0.0.1", 0))
        dropped = mux.stats.dropped_unknown
        before = (mux.stats.unknown_ufrag, mux.stats.unknown_source, mux.stats.transaction_misses)
        request = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
        request.attributes["USERNAME"] = "nosuchufrag:x"
        response = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.RESPONSE)
        datagrams = [b"\x80\x6f" + os.urandom(40), b"\x16\xfe\xfd" + os.urandom(30),
                     bytes(request), bytes(response)]
        for data in datagrams:
            transport.sendto(data, mux.local_address)
        await wait_for(lambda: mux.stats.dropped_unknown >= dropped + len(datagrams), timeout=2,
                       what=lambda: (dropped, mux.stats))
        assert stray.received == []  # not even an error response: the ufrag is nobody's
        # by kind: the request a demux miss, the rest (RTP, DTLS, the response) unknown sources
        after = (mux.stats.unknown_ufrag, mux.stats.unknown_source, mux.stats.transaction_misses)
        assert [a - b for a, b in zip(after, before)] == [1, 3, 1]
        transport.close()
        # the sessions are unharmed
        counts = [c.capture.count for c in clients]
        await asyncio.gather(*(c.capture.wait_packets(n + 5) for c, n in zip(clients, counts)))
        assert mux.entries["addresses"] == 2
    finally:
        for client in clients:
            await client.close()


async def test_ice_restart_keeps_the_session_on_the_shared_socket(gateway):
    client = GatewayClient(gateway.url, gateway.http, capture=True)
    await client.connect()
    try:
        session = next(iter(gateway.registry))
        mux = mux_of(gateway)
        old = aiortc_compat.ice_credentials(session.webrtc._ice)[0][0]
        assert len(old) == 8
        new = session.webrtc.restart_ice("abcd", "a" * 22)
        ufrag = new.split("a=ice-ufrag:")[1].split("\r\n")[0]
        assert mux.owner_of(ufrag) is mux.owner_of(old) is not None
        aiortc_compat.restart_ice(session.webrtc._ice, "efgh", "b" * 22)
        assert mux.owner_of(old) is None  # only the latest ufrags are kept
        assert len(mux.owner_of(ufrag).ufrags) == MAX_UFRAGS_PER_ENDPOINT
        count = client.capture.count
        await client.capture.wait_packets(count + 5)  # media carries on over the same pair
    finally:
        await client.close()
    await wait_for(lambda: mux.entries["ufrags"] == 0)


@pytest.mark.timeout(60)
async def test_consent_failure_removes_the_sessions_entries(gateway):
    with aiortc_compat.consent_timing(0.3, 3):
        clients = await connect_many(gateway, 2)
        mux = mux_of(gateway)
        vanishing, staying = clients
        session = gateway.registry.get(vanishing.session_url.rsplit("/", 1)[1])
        transport = vanishing.transceiver.receiver.transport
        aiortc_compat.impair_outgoing(transport, lambda sendto: lambda *args: None)
        await asyncio.wait_for(session.closed.wait(), timeout=30)  # consent failed: reaped
        await wait_for(lambda: mux.stats.endpoints == 1)  # its sockets' close runs after
        assert mux.entries["ufrags"] == 1 and mux.entries["addresses"] == 1
        count = staying.capture.count
        await staying.capture.wait_packets(count + 5)
        for client in clients:
            await client.close()


def test_each_worker_gets_its_own_udp_port():
    from gateway.cluster.processes import Slot, worker_args
    from gateway.config import GatewayConfig

    config = GatewayConfig(port=9000, udp_port=40000, workers=2)
    for index in range(2):
        slot = Slot(index=index, id=f"nw{index}", port=9001 + index, url="u", local_url="u")
        args = worker_args([], config, slot, "http://127.0.0.1:9000")
        assert args[args.index("--udp-port") + 1] == str(40000 + index)
    config = GatewayConfig(port=9000, workers=2)  # 0: each worker takes a free port
    assert "--udp-port" not in worker_args([], config, slot, "http://127.0.0.1:9000")


def test_stun_fields():
    request = aioice.stun.Message(aioice.stun.Method.BINDING, aioice.stun.Class.REQUEST)
    request.attributes["USERNAME"] = "ours1234:theirs"
    request.attributes["PRIORITY"] = 1
    request.add_message_integrity(b"key")
    data = bytes(request)
    assert stun_fields.is_stun(data)
    assert stun_fields.stun_class(data) == stun_fields.REQUEST
    assert stun_fields.local_ufrag(data) == "ours1234"
    assert stun_fields.transaction_id(data) == request.transaction_id
    assert not stun_fields.is_stun(data[:-1]) and not stun_fields.is_stun(b"\x80" + data[1:])
    assert stun_fields.local_ufrag(data[:24]) is None  # a truncated attribute


async def wait_for(predicate: Any, timeout: float = 10.0, what: Any = None) -> None:
    """Poll a condition the gateway reaches on its own (no event exposes these counters)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not reached: {what() if what else ''}")
        await asyncio.sleep(0.02)


async def test_flush_pending_sends_the_queued_datagrams_at_once():
    """What a tick queued leaves when the ticker's end-of-tick hook flushes, not one loop
    iteration later; a closed mux is no longer pending."""
    from gateway.net import udp_mux

    mux = await UdpMux.bind("127.0.0.1")
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.settimeout(0)
    try:
        address = peer.getsockname()
        mux.queue(b"\x80\x6f first", address)
        mux.queue(b"\x80\x6f second", address)
        assert mux in udp_mux._PENDING
        with pytest.raises(BlockingIOError):
            peer.recv(100)  # queued, not sent
        udp_mux.flush_pending()  # no await in between: sent now, synchronously
        assert [peer.recv(100), peer.recv(100)] == [b"\x80\x6f first", b"\x80\x6f second"]
        assert mux not in udp_mux._PENDING and mux.stats.batches == 1
        await asyncio.sleep(0)  # the call_soon fallback finds nothing left to send
        assert mux.stats.batches == 1
        mux.queue(b"\x80\x6f third", address)
        mux.close()
        assert mux not in udp_mux._PENDING
    finally:
        peer.close()
        mux.close()
