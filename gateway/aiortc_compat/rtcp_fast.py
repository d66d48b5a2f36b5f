"""The SRTCP fast path (issue 28): a connected session's RTCP -- a listener's receiver reports
and NACKs, a talker's sender reports -- taken straight from the shared UDP socket's read loop,
as rx_fast.py takes a talker's RTP.

aiortc's way, per datagram: the mux -> aioice's ``StunProtocol.datagram_received`` (a STUN
parse attempt first) -> ``Connection.data_received`` -> its queue -> a wake-up of the DTLS
transport's receive task (``_recv_next``) -> ``unprotect_rtcp`` -> ``_handle_rtcp_data`` (the
NACK responder's interception, ``intercept_rtcp``, then aiortc's parse and its routing to the
sender's and receiver's ``_handle_rtcp_packet``). Here the endpoint's callback does the same
synchronously: the transport's own rx SRTP session (the same SRTCP replay window: a replayed or
forged datagram is dropped as aiortc drops it), the transport's received counters, then
``_handle_rtcp_data`` itself -- the coroutine aiortc would have awaited, run to its end at once.

Those handlers do not wait on anything in this gateway (a NACK's answer is queued on the shared
socket). Should one suspend, it is finished in a task, and the transport's later RTCP is handled
after it in that task, in order (at most ``MAX_BACKLOG`` datagrams wait; more are dropped and
counted). A handler that raises is counted and logged once a session; it does not close the
transport (aiortc's receive task would have ended on it). Everything else -- STUN, DTLS, SRTP
RTP (rx_fast.py's, or aiortc's), a datagram while aioice's queue still holds earlier ones, a
transport not connected -- keeps aiortc's path.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from collections.abc import Coroutine, Generator
from dataclasses import asdict, dataclass
from typing import Any

import aiortc.rtcdtlstransport
import pylibsrtp
from aiortc import RTCDtlsTransport

from gateway.aiortc_compat._common import _MUX_ENDPOINTS, _ice_connection, _missing_names
from gateway.aiortc_compat.dtls import srtcp_unprotector

log = logging.getLogger(__name__)

_CONNECTED = aiortc.rtcdtlstransport.State.CONNECTED
_RX_BYTES = "_RTCDtlsTransport__rx_bytes"
_RX_PACKETS = "_RTCDtlsTransport__rx_packets"
_DTLS_ATTRS = ("_rx_srtp", "_state", "_transport", _RX_BYTES, _RX_PACKETS)
#: Where the callback is kept on the session's aioice ``Connection`` (rx_fast.py's RTP callback
#: hands it the RTCP it sees; teardown removes it)
FAST_RTCP = "_gateway_fast_rtcp"
#: Datagrams that may wait behind a handler that suspended; more are dropped and counted
MAX_BACKLOG = 64


def _rtcp_fast_problems() -> list[str]:
    """check_internals' part for this module: what aiortc's receive task does with SRTCP, which
    the callback repeats."""
    problems = _missing_names(RTCDtlsTransport.__init__, _DTLS_ATTRS, "RTCDtlsTransport.{}")
    problems += _missing_names(
        getattr(RTCDtlsTransport, "_recv_next", None),
        ("_rx_srtp", "unprotect_rtcp", "_handle_rtcp_data", "is_rtcp", _RX_BYTES, _RX_PACKETS),
        "RTCDtlsTransport._recv_next no longer uses {}",
    )
    if not asyncio.iscoroutinefunction(getattr(RTCDtlsTransport, "_handle_rtcp_data", None)):
        problems.append("RTCDtlsTransport._handle_rtcp_data is no longer a coroutine function")
    return problems


@dataclass
class FastRtcpStats:
    """One session's SRTCP fast path (``WebRtcLeg.state()`` -> ``rtcp_fast``)."""

    packets: int = 0  # SRTCP unprotected and handled from the read loop
    queued_behind: int = 0  # left to aiortc: its queue still held earlier datagrams (order)
    srtp_dropped: int = 0  # unprotect refused them (a replay, failed authentication): dropped
    suspended: int = 0  # a handler waited on something: finished in a task
    backlog_dropped: int = 0  # more than MAX_BACKLOG behind a waiting handler: dropped
    failed: int = 0  # a handler raised (logged once)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def fast_rtcp_refusal(transport: RTCDtlsTransport) -> str | None:
    """Why ``receive_rtcp_directly`` would not install on ``transport`` (None: it would)."""
    if transport.state != "connected":
        return "transport not connected"
    for name in _DTLS_ATTRS:
        if not hasattr(transport, name):
            return f"RTCDtlsTransport has no {name}"
    if transport._rx_srtp is None:
        return "no SRTP session"
    connection = _ice_connection(transport)
    if "data_received" in vars(connection):
        return "incoming datagrams are impaired (impair_incoming)"
    if not vars(connection).get(_MUX_ENDPOINTS):
        return "not on the shared UDP socket"
    return None


def receive_rtcp_directly(transport: RTCDtlsTransport) -> FastRtcpStats | None:
    """Take ``transport``'s SRTCP from the shared socket's read loop (see the module's doc).

    Call once the transport is connected, before ``receive_rtp_directly`` (whose RTP callback
    hands this one the RTCP it sees). Returns the path's counters, or None when it does not
    apply (``fast_rtcp_refusal`` says why): then nothing changed. Removed when the endpoint
    closes or at teardown (``FastRtcp.close``); it holds the transport weakly."""
    if fast_rtcp_refusal(transport) is not None:
        return None
    connection_vars = vars(_ice_connection(transport))
    stats = FastRtcpStats()
    callback = FastRtcp(transport, stats)
    connection_vars[FAST_RTCP] = callback
    for endpoint in connection_vars[_MUX_ENDPOINTS]:
        if endpoint.fast_receive is None:
            endpoint.fast_receive = callback
    return stats


class FastRtcp:
    """The endpoint's callback for SRTCP: True when it took the datagram (handled or dropped),
    False when aiortc's path should have it."""

    __slots__ = ("_backlog", "_session", "_task", "_transport", "_unprotect", "stats")

    def __init__(self, transport: RTCDtlsTransport, stats: FastRtcpStats) -> None:
        self._transport = weakref.ref(transport)  # (the endpoint is reachable from it: no cycle)
        self._session = transport._rx_srtp
        self._unprotect = srtcp_unprotector(self._session)
        self.stats = stats
        self._backlog: deque[bytes] = deque()
        self._task: asyncio.Task[None] | None = None

    def __call__(self, data: bytes) -> bool:
        # SRTCP only: aiortc's SRTP test (128..191) and its ``is_rtcp`` (192..208)
        if len(data) < 2 or not 128 <= data[0] <= 191 or not 192 <= data[1] <= 208:
            return False
        dtls = self._transport()
        if dtls is None or dtls._state is not _CONNECTED or dtls._rx_srtp is not self._session:
            return False
        stats = self.stats
        if dtls._transport._connection._queue.qsize():
            stats.queued_behind += 1  # earlier datagrams first: aiortc's task takes this too
            return False
        counters = vars(dtls)  # (its getStats counters, name-mangled: no getattr / setattr)
        counters[_RX_BYTES] += len(data)
        counters[_RX_PACKETS] += 1
        try:
            clear = self._unprotect(data)
        except pylibsrtp.Error:
            stats.srtp_dropped += 1
            return True
        stats.packets += 1
        if self._task is not None:  # one is waiting: this comes after it
            if len(self._backlog) >= MAX_BACKLOG:
                stats.backlog_dropped += 1
            else:
                self._backlog.append(clear)
            return True
        coro = dtls._handle_rtcp_data(clear)
        try:
            waited = coro.send(None)
        except StopIteration:
            return True
        except Exception:
            self._failed()
            return True
        stats.suspended += 1
        self._task = asyncio.ensure_future(self._finish(coro, waited))
        return True

    async def _finish(self, coro: Coroutine[Any, Any, None], waited: Any) -> None:
        """The handler that suspended, then every datagram queued behind it, in order."""
        try:
            try:
                await _Resumed(coro, waited)
            except Exception:
                self._failed()
            while self._backlog:
                dtls = self._transport()
                if dtls is None:
                    break
                try:
                    await dtls._handle_rtcp_data(self._backlog.popleft())
                except Exception:
                    self._failed()
        finally:
            self._backlog.clear()
            self._task = None

    def _failed(self) -> None:
        self.stats.failed += 1
        if self.stats.failed == 1:
            log.warning("an RTCP handler failed on the SRTCP fast path", exc_info=True)

    def close(self) -> None:
        """Cancel a handler still waiting (the session is going)."""
        self._backlog.clear()
        if self._task is not None:
            self._task.cancel()


class _Resumed:
    """Awaiting it finishes ``coro``, which suspended on ``waited`` when it was first run: the
    task waits on what the coroutine waited on and resumes it with what the task is sent or
    thrown, as if the task had run it from the start."""

    __slots__ = ("coro", "waited")

    def __init__(self, coro: Coroutine[Any, Any, None], waited: Any) -> None:
        self.coro = coro
        self.waited = waited

    def __await__(self) -> Generator[Any, Any, None]:
        coro, waited = self.coro, self.waited
        while True:
            try:
                sent = yield waited
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # (a cancellation: the coroutine sees it where it waits)
                try:
                    waited = coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                waited = coro.send(sent)
            except StopIteration:
                return
