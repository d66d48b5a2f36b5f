"""How an HTTP stream coalesces ready frames into writes (the field report's experiment).

The first frame is always written at once. After it, frames that are ready together are
coalesced into one write up to a flush size chosen from the connection's round-trip time
(Linux ``TCP_INFO`` ``tcpi_rtt``): below 50 ms small (16 KB), else larger (32 KB). With the
``frame`` policy every frame is its own write (the comparison).
"""

from __future__ import annotations

import socket
import struct
from typing import Literal

FlushPolicy = Literal["adaptive", "frame"]
SMALL_FLUSH = 16 * 1024
LARGE_FLUSH = 32 * 1024
RTT_THRESHOLD_MS = 50.0
_TCPI_RTT_OFFSET = 68  # struct tcp_info: 8 one-byte fields, then u32 rto, ato, ... rtt (16th)


def tcp_rtt_ms(sock: socket.socket | None) -> float | None:
    """The kernel's smoothed RTT of a TCP socket in ms, or None where it cannot be read."""
    if sock is None or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return None
    if len(info) < _TCPI_RTT_OFFSET + 4:
        return None
    (rtt_us,) = struct.unpack_from("I", info, _TCPI_RTT_OFFSET)
    return rtt_us / 1000


def flush_bytes(policy: FlushPolicy, rtt_ms: float | None) -> int:
    """The most bytes one coalesced write may hold (0: every frame its own write)."""
    if policy == "frame":
        return 0
    if rtt_ms is not None and rtt_ms >= RTT_THRESHOLD_MS:
        return LARGE_FLUSH
    return SMALL_FLUSH
