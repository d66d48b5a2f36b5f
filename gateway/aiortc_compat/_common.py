"""Helpers every part of ``gateway.aiortc_compat`` shares: the loud check of a private name
and the ways to reach a transport's aioice ``Connection``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from aiortc import (
    RTCDtlsTransport,
    RTCPeerConnection,
)


def _require(obj: object, attr: str) -> None:
    if not hasattr(obj, attr):
        raise RuntimeError(
            f"aiortc internals moved: {type(obj).__name__} has no {attr!r}; "
            "gateway.aiortc_compat needs updating for this aiortc version"
        )



def _ice_connection(transport: RTCDtlsTransport) -> Any:
    ice = transport.transport
    _require(ice, "_connection")
    return ice._connection



def _ice_connection_of(ice: Any) -> Any:
    _require(ice, "_connection")
    return ice._connection



_ORIGINAL_SEND_RTP = "_gateway_original_send_rtp"
_PC_ICE_TRANSPORTS = "_RTCPeerConnection__iceTransports"
_MUX_ENDPOINTS = "_gateway_mux_endpoints"


def _ice_connections(pc: RTCPeerConnection, attrs: Sequence[str]) -> Iterator[Any]:
    """The aioice ``Connection`` of each of ``pc``'s ICE transports, each checked to have
    ``attrs`` (a loud error if an upgrade moved them)."""
    transports = getattr(pc, _PC_ICE_TRANSPORTS, None)
    if not isinstance(transports, set):
        raise RuntimeError(f"aiortc internals moved: RTCPeerConnection has no {_PC_ICE_TRANSPORTS}")
    for ice in list(transports):
        connection = _ice_connection_of(ice)
        for attr in attrs:
            _require(connection, attr)
        yield connection
