"""A closed peer connection's reference cycles, cut (session/teardown.py)."""

from __future__ import annotations

from typing import Any

import aioice.candidate
import aioice.ice
import aioice.stun
from aiortc import (
    RTCDtlsTransport,
    RTCPeerConnection,
)

from gateway.aiortc_compat._common import _MUX_ENDPOINTS, _ORIGINAL_SEND_RTP
from gateway.aiortc_compat.reports import unpark_sender_reports
from gateway.aiortc_compat.rtcp_fast import FAST_RTCP
from gateway.aiortc_compat.rtp_taps import RTP_TAP

# --- teardown: a closed peer connection's reference cycles, cut (session/teardown.py) ----------

_OUR_DTLS_WRAPPERS = ("_handle_rtcp_data", "_send_rtp", _ORIGINAL_SEND_RTP)
_OUR_RECEIVER_WRAPPERS = ("_handle_rtp_packet", RTP_TAP)


def _teardown_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    connection = aioice.ice.Connection(ice_controlling=True)
    if not isinstance(getattr(connection, "_check_list", None), list):
        problems.append("aioice.Connection._check_list")
    for name in ("CONSENT_INTERVAL", "CONSENT_FAILURES"):
        if not isinstance(getattr(aioice.ice, name, None), int | float):
            problems.append(f"aioice.ice.{name}")
    return problems


def peer_connection_transports(pc: RTCPeerConnection) -> list[Any]:
    """The peer connection's DTLS and ICE transports (public properties), each once."""
    found: dict[int, Any] = {}
    for transceiver in pc.getTransceivers():
        for part in (transceiver.sender, transceiver.receiver):
            dtls = part.transport
            if dtls is not None:
                found.setdefault(id(dtls), dtls)
                found.setdefault(id(dtls.transport), dtls.transport)
    sctp = pc.sctp
    if sctp is not None:
        found.setdefault(id(sctp.transport), sctp.transport)
        found.setdefault(id(sctp.transport.transport), sctp.transport.transport)
    return list(found.values())


def release_peer_connection(pc: RTCPeerConnection) -> None:
    """Cut the reference cycles a *closed* peer connection keeps, so refcounting frees it:

    - every transport's event listeners (pyee's public ``remove_all_listeners``): aiortc's
      ``close`` removes the peer connection's own and the ICE transport's, not the DTLS
      transport's ``statechange`` -> ``RTCPeerConnection.__updateConnectionState`` -> the peer
      connection -> its DTLS transports;
    - the instance-level wrappers this module installed (``intercept_rtcp``,
      ``drop_first_transmissions``, ``tap_rtp``, ``impair_incoming``, the shared socket
      endpoints' ``receive_rtp_directly`` callback, ``receive_rtcp_directly``'s, a handler of
      its still waiting cancelled): closures over our
      objects that reach the transport again (RTCP handler -> Retransmitter -> sender ->
      transport; a client's datagram hook -> the client -> its peer connection);
    - aioice's ``Connection._check_list``: pair -> protocol -> ``receiver`` (the connection);
      its ``close`` empties the protocols and nominated pairs but keeps the list.
    """
    for transceiver in pc.getTransceivers():
        unpark_sender_reports(transceiver.sender)
        receiver_vars = vars(transceiver.receiver)
        for name in _OUR_RECEIVER_WRAPPERS:
            receiver_vars.pop(name, None)
    for transport in peer_connection_transports(pc):
        transport.remove_all_listeners()
        if isinstance(transport, RTCDtlsTransport):
            transport_vars = vars(transport)
            for name in _OUR_DTLS_WRAPPERS:
                transport_vars.pop(name, None)
        else:  # RTCIceTransport
            transport.iceGatherer.remove_all_listeners()
            connection = getattr(transport, "_connection", None)
            if connection is not None:
                vars(connection).pop("data_received", None)  # ``impair_incoming``'s wrapper
                vars(connection).pop("get_component_candidates", None)  # ``share_udp_socket``
                for endpoint in vars(connection).pop(_MUX_ENDPOINTS, ()):
                    endpoint.fast_receive = None  # ``receive_rtp_directly``
                fast_rtcp = vars(connection).pop(FAST_RTCP, None)  # ``receive_rtcp_directly``
                if fast_rtcp is not None:
                    fast_rtcp.close()
                check_list = getattr(connection, "_check_list", None)
                if isinstance(check_list, list):
                    check_list.clear()
    pc.remove_all_listeners()
