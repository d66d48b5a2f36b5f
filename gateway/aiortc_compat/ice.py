"""ICE: host candidate addresses, datagram impairment (tests), restart with new credentials,
the nominated pair's types, the shared UDP socket per worker and the connectivity-check budget."""

from __future__ import annotations

import asyncio
import ipaddress
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aioice.candidate
import aioice.ice
import aioice.stun
from aiortc import (
    RTCDtlsTransport,
    RTCPeerConnection,
)

from gateway.aiortc_compat._common import (
    _MUX_ENDPOINTS,
    _PC_ICE_TRANSPORTS,
    _ice_connection,
    _ice_connection_of,
    _ice_connections,
    _missing_names,
    _require,
)
from gateway.net.udp_mux import UdpMux

_original_get_host_addresses = aioice.ice.get_host_addresses


# --- ICE: host candidate addresses ------------------------------------------------------------


def restrict_ice_hosts(hosts: Sequence[str] | None) -> None:
    """Gather host candidates on ``hosts`` only (None or empty: aioice's default, all interfaces).

    Process-wide: aioice reads this function for every ICE gathering.
    """
    if not hosts:
        aioice.ice.get_host_addresses = _original_get_host_addresses
        return
    addresses = [str(ipaddress.ip_address(h)) for h in hosts]

    def get_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
        return [
            a
            for a in addresses
            if (use_ipv4 and ipaddress.ip_address(a).version == 4)
            or (use_ipv6 and ipaddress.ip_address(a).version == 6)
        ]

    aioice.ice.get_host_addresses = get_host_addresses



# --- ICE: datagram impairment ------------------------------------------------------------------

Deliver = Callable[[bytes, Any], None]



def impair_incoming(transport: RTCDtlsTransport, wrap: Callable[[Deliver], Deliver]) -> None:
    """Route every datagram the peer receives (after STUN) through ``wrap(deliver)``.

    ``deliver(data, component)`` hands a datagram on to DTLS/SRTP; the wrapper may drop, delay
    or duplicate it.
    """
    connection = _ice_connection(transport)
    _require(connection, "data_received")
    connection.data_received = wrap(connection.data_received)


def impair_outgoing(transport: RTCDtlsTransport, wrap: Callable[[Deliver], Deliver]) -> int:
    """Route every datagram the peer sends through ``wrap(sendto)``; returns sockets wrapped."""
    connection = _ice_connection(transport)
    _require(connection, "_protocols")
    wrapped = 0
    for protocol in connection._protocols:
        udp = getattr(protocol, "transport", None)
        if udp is not None:
            udp.sendto = wrap(udp.sendto)
            wrapped += 1
    return wrapped



# --- ICE: restart with new credentials (WHEP PATCH, RFC 8840 / 8445 section 9) ------------------


def restart_ice(
    ice: Any, remote_ufrag: str, remote_pwd: str, local: tuple[str, str] | None = None
) -> tuple[str, str]:
    """Give ``ice`` (an ``RTCIceTransport``) new local credentials (``local`` or random ones,
    RFC 8445's 4+ and 22+ characters) and the remote side's new ones, in place; returns the new
    local (ufrag, pwd). Checks and consent (RFC 7675) use the new credentials from now on; the
    nominated pair keeps carrying media until the peer nominates another; new remote candidates
    may be trickled again."""
    _require(ice, "_connection")
    connection = ice._connection
    for attr in ("_local_username", "_local_password", "_remote_candidates_end"):
        _require(connection, attr)
    muxed = _MUX_ENDPOINTS in vars(connection)
    ufrag_length = _MUX_UFRAG_LENGTH if muxed else 4
    ufrag, pwd = local or (aioice.ice.random_string(ufrag_length), aioice.ice.random_string(22))
    aioice.ice.validate_username(ufrag)
    aioice.ice.validate_password(pwd)
    aioice.ice.validate_username(remote_ufrag)
    aioice.ice.validate_password(remote_pwd)
    if muxed:
        _note_mux_ufrag(connection, ufrag)
    connection._local_username, connection._local_password = ufrag, pwd
    connection.remote_username, connection.remote_password = remote_ufrag, remote_pwd
    connection._remote_candidates_end = False
    return ufrag, pwd


def ice_credentials(ice: Any) -> tuple[tuple[str, str], tuple[str | None, str | None]]:
    """((local ufrag, pwd), (remote ufrag, pwd)) of an ``RTCIceTransport``."""
    connection = _ice_connection_of(ice)
    return ((connection.local_username, connection.local_password),
            (connection.remote_username, connection.remote_password))



# --- ICE: the nominated pair's candidate types (latency timelines; read-only) -------------------


def nominated_pair_types(transport: RTCDtlsTransport) -> dict[str, str | None] | None:
    """The nominated pair's local and remote candidate types (``host``, ``prflx``, ``srflx``,
    ``relay``) and the remote address, or None before a pair is nominated. A remote ``prflx``
    is a peer whose checks came before (or without) its candidate: a trickle offer with no
    candidates in it."""
    ice = transport.transport
    connection = getattr(ice, "_connection", None)
    nominated = getattr(connection, "_nominated", None)
    if not isinstance(nominated, dict):
        return None
    pair = nominated.get(1)
    if pair is None:
        return None
    remote = pair.remote_candidate
    host = f"[{remote.host}]" if ":" in remote.host else remote.host
    return {"local": pair.local_candidate.type, "remote": remote.type,
            "remote_address": f"{host}:{remote.port}"}


_MUX_UFRAG_LENGTH = 8  # aioice draws 4 characters: 1 in ≈15 M; on one socket, ufrags must differ


def _mux_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("_protocols", "_local_username", "stun_server"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    if not callable(getattr(probe, "get_component_candidates", None)):
        problems.append("aioice.Connection.get_component_candidates")
    for name in ("server_reflexive_candidate", "random_string"):
        if not callable(getattr(aioice.ice, name, None)):
            problems.append(f"aioice.ice.{name}")
    for name in ("Candidate", "candidate_foundation", "candidate_priority"):
        if not callable(getattr(aioice.candidate, name, None)):
            problems.append(f"aioice.candidate.{name}")
    stun_protocol = getattr(aioice.ice, "StunProtocol", None)
    # set in its __init__ (which needs a loop)
    problems += _missing_names(getattr(stun_protocol, "__init__", None),
                               ("transactions", "receiver"), "aioice.StunProtocol.{}")
    for name in ("connection_made", "datagram_received", "connection_lost"):
        if not callable(getattr(stun_protocol, name, None)):
            problems.append(f"aioice.StunProtocol.{name}")
    problems += _missing_names(RTCPeerConnection.__init__, (_PC_ICE_TRANSPORTS,),
                               "RTCPeerConnection.{}")
    return problems


def host_addresses() -> list[str]:
    """The addresses aioice gathers host candidates on (``restrict_ice_hosts`` applies)."""
    return list(aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True))


def share_udp_socket(pc: RTCPeerConnection, muxes: Callable[[str], UdpMux | None]) -> int:
    """Make ``pc``'s ICE agents gather their host candidates on the worker's shared sockets
    (``muxes(address)``: the ``UdpMux`` of that host address) instead of binding one socket per
    session: each agent's ``StunProtocol`` is given a ``MuxEndpoint`` as its transport, reached
    by our ufrag (made 8 characters long: unique on the socket). The host candidate advertises
    the shared port. Server-reflexive candidates (a STUN server) are asked for through the
    shared socket; TURN relays are aioice's own, as before.

    Call after ``setRemoteDescription`` and before ``setLocalDescription`` (which gathers).
    Returns the ICE agents changed."""
    changed = 0
    attrs = ("_protocols", "_local_username", "get_component_candidates")
    for connection in _ice_connections(pc, attrs):
        if _MUX_ENDPOINTS in vars(connection):
            continue
        connection._local_username = aioice.ice.random_string(_MUX_UFRAG_LENGTH)
        setattr(connection, _MUX_ENDPOINTS, [])
        connection.get_component_candidates = _muxed_gathering(
            connection, connection.get_component_candidates, muxes
        )
        changed += 1
    return changed


def _muxed_gathering(
    connection: Any,
    original: Callable[..., Awaitable[list[Any]]],
    muxes: Callable[[str], UdpMux | None],
) -> Callable[..., Awaitable[list[Any]]]:
    async def get_component_candidates(
        component: int, addresses: list[str], timeout: int = 5
    ) -> list[Any]:
        candidates: list[Any] = []
        protocols: list[Any] = []
        unmuxed: list[str] = []
        for address in addresses:
            mux = muxes(address)
            if mux is None:  # an interface that appeared after start-up: aioice's own socket
                unmuxed.append(address)
                continue
            protocol = aioice.ice.StunProtocol(connection)
            endpoint = mux.attach(protocol, connection.local_username)
            getattr(connection, _MUX_ENDPOINTS).append(endpoint)
            protocol.connection_made(endpoint)
            protocol.local_candidate = aioice.candidate.Candidate(
                foundation=aioice.candidate.candidate_foundation("host", "udp", address),
                component=component, transport="udp",
                priority=aioice.candidate.candidate_priority(component, "host"),
                host=address, port=mux.local_address[1], type="host",
            )
            candidates.append(protocol.local_candidate)
            protocols.append(protocol)
        connection._protocols += protocols
        if connection.stun_server:
            tasks = [
                asyncio.ensure_future(
                    aioice.ice.server_reflexive_candidate(p, connection.stun_server))
                for p in protocols
                if ipaddress.ip_address(p.local_candidate.host).version == 4
            ]
            if tasks:
                done, pending = await asyncio.wait(tasks, timeout=timeout)
                for task in pending:
                    task.cancel()
                candidates += [t.result()[0] for t in done if t.exception() is None]
        # TURN (and hosts with no shared socket): aioice's own gathering, its own sockets
        return candidates + await original(component, unmuxed, timeout)

    return get_component_candidates


def _note_mux_ufrag(connection: Any, ufrag: str) -> None:
    """An ICE restart on a shared socket: requests for the new ufrag reach this session too
    (raises ValueError, changing nothing, if another session of the socket has it)."""
    endpoints = vars(connection).get(_MUX_ENDPOINTS, ())
    for endpoint in endpoints:
        owner = endpoint.mux.owner_of(ufrag)
        if owner is not None and owner is not endpoint:
            raise ValueError("ufrag already in use on the shared UDP socket")
    for endpoint in endpoints:
        endpoint.add_ufrag(ufrag)


def uses_udp_mux(pc: RTCPeerConnection) -> bool:
    transports = getattr(pc, _PC_ICE_TRANSPORTS, set())
    return any(_MUX_ENDPOINTS in vars(_ice_connection_of(t)) for t in transports)


# --- ICE: a reflection budget -----------------------------------------------------------------

_CHECK_PERIODIC = "_check_periodic"  # aioice's Ta timer body: starts the next check, or stops
_PACED = "_gateway_paced_checks"


def _check_pacing_problems() -> list[str]:
    """check_internals' part for this section."""
    probe = aioice.ice.Connection(ice_controlling=False)
    problems = []
    if not callable(getattr(probe, _CHECK_PERIODIC, None)):
        problems.append(f"aioice.Connection.{_CHECK_PERIODIC}")
    if not hasattr(probe, "_check_list_done"):
        problems.append("aioice.Connection._check_list_done")
    connect = getattr(aioice.ice.Connection, "connect", None)
    if _CHECK_PERIODIC not in getattr(getattr(connect, "__code__", None), "co_names", ()):
        problems.append(f"aioice.Connection.connect no longer calls {_CHECK_PERIODIC}")
    return problems


def pace_connectivity_checks(pc: RTCPeerConnection, per_s: float) -> int:
    """At most ``per_s`` new ICE connectivity checks a second from each of ``pc``'s agents
    (bursts of ``per_s``), instead of aioice's one every 20 ms (50/s): each check goes to an
    address the remote side named, with up to 6 retransmissions, so an unpaced agent given
    thousands of candidates aimed at a third party is a reflection tool (3,000 candidates drew
    6,018 packets to one port in 30 s). aioice's ``connect`` calls ``_check_periodic`` every 20
    ms while it returns True; the paced one starts nothing (and keeps the timer going) while
    the budget is spent. Call after ``setRemoteDescription``. Returns the agents paced."""
    if per_s <= 0:
        return 0
    paced = 0
    for connection in _ice_connections(pc, (_CHECK_PERIODIC, "_check_list_done")):
        if _PACED in vars(connection):
            continue
        setattr(connection, _PACED, True)
        connection._check_periodic = _paced(connection, per_s)
        paced += 1
    return paced


def _paced(connection: Any, per_s: float) -> Callable[[], bool]:
    """The paced ``_check_periodic``. It holds the connection weakly and aioice's method
    unbound: stored on the connection, a closure over it (or over its bound method) would be a
    reference cycle, and every closed session's ICE state would wait for a full collection."""
    bound = connection._check_periodic
    original = getattr(bound, "__func__", None)
    if original is None or getattr(bound, "__self__", None) is not connection:
        raise TypeError("aioice's Connection._check_periodic is not a plain method here")
    ref = weakref.ref(connection)
    state = {"tokens": per_s, "at": time.monotonic()}

    def check_periodic() -> bool:
        conn = ref()
        if conn is None:
            return False
        now = time.monotonic()
        state["tokens"] = min(per_s, state["tokens"] + (now - state["at"]) * per_s)
        state["at"] = now
        if state["tokens"] < 1.0:
            return not conn._check_list_done  # wait for the budget; stop once done
        state["tokens"] -= 1.0
        return bool(original(conn))

    return check_periodic
