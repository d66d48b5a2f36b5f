"""Helpers every part of ``gateway.aiortc_compat`` shares: the loud check of a private name
and the ways to reach a transport's aioice ``Connection``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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



def _missing_names(func: object, names: Iterable[str], label: str) -> list[str]:
    """``label.format(name)`` for each of ``names`` that ``func``'s code no longer uses (its
    ``co_names``: the globals and attributes it reads or writes); all of them when ``func``
    is gone or has no code -- the loud half of checking that aiortc still does what we rely
    on."""
    used = getattr(getattr(func, "__code__", None), "co_names", ())
    return [label.format(name) for name in names if name not in used]


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
