"""One UDP socket serving every session of a worker (mediasoup's WebRtcServer, LiveKit's and
pion's UDPMux): each session's ICE agent gets an ``MuxEndpoint`` -- an asyncio datagram
transport of its own that sends through the shared socket -- and the mux hands every datagram
that arrives to the endpoint it belongs to:

- a STUN binding request, by its USERNAME's first part (our ufrag; an ICE restart adds the new
  one): that also binds the request's source address to the endpoint;
- a STUN response, by its transaction id (recorded when the endpoint sent the request: consent
  checks, connectivity checks, a STUN server's answer);
- anything else (DTLS, SRTP, SRTCP, STUN indications), by its source address; an endpoint's
  ``fast_receive`` (installed by a connected session's receive fast path, aiortc_compat/
  rx_fast.py) sees it first and may take it then and there, with no queue and no task switch.

Anything the tables do not name is dropped and counted (``MuxStats``). Closing an endpoint
removes every entry of it. Addresses per endpoint and transactions in flight are bounded.

Datagrams queued with ``send_batched`` (the RTP of one tick) leave together after the current
callback: one ``sendmmsg`` (net/sendmmsg.py) where available, else one ``sendto`` each. With the
compiled send path (net/sendpath.py, ``compiled_batch``) RTP is staged already protected in a C
arena instead and goes in the same flush.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from gateway.net import sendmmsg, sendpath
from gateway.net.stun_fields import REQUEST, is_stun, local_ufrag, stun_class, transaction_id

log = logging.getLogger(__name__)

Address = tuple[str, int]
MAX_ADDRESSES_PER_ENDPOINT = 32  # a peer's candidates that checked us; more are refused
MAX_TRANSACTIONS = 8192  # outgoing STUN requests awaiting a response, oldest forgotten first
MAX_UFRAGS_PER_ENDPOINT = 2  # the current ufrag and the one before an ICE restart
SOCKET_BUFFER = 4 << 20  # bytes; the kernel caps it at net.core.[rw]mem_max
MAX_READS = 8192  # datagrams read per wake-up: about what the socket's buffer holds, so one
# wake-up drains it (per-session sockets were drained all at once too, 32 each per iteration)
RECV_SIZE = 2048  # past any datagram of ours (MTU-sized)


class DatagramReceiver(Protocol):
    """What an endpoint delivers to (aioice's ``StunProtocol`` is one)."""

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


@dataclass
class MuxStats:
    """Plain-int counters (the hot path pays an attribute increment); /healthz shows them and
    /metrics exports them (``runtime/metrics.py``: ``MUX_COUNTERS``, ``MUX_GAUGES``)."""

    endpoints: int = 0
    addresses: int = 0
    received: int = 0
    routed_by_ufrag: int = 0
    routed_by_transaction: int = 0
    routed_by_address: int = 0
    dropped_unknown: int = 0  # both kinds below
    unknown_ufrag: int = 0  # STUN requests for no session's ufrag (a demux miss)
    unknown_source: int = 0  # anything else from an address no session has
    dropped_empty: int = 0  # empty datagrams (aiortc's receive task ends on one: its session)
    transaction_misses: int = 0  # STUN responses to no request in flight (then by address)
    refused_addresses: int = 0
    read_errors: int = 0  # recvfrom errors (an ICMP error queued on the socket)
    sent: int = 0
    batches: int = 0
    batched: int = 0
    sendmmsg_calls: int = 0
    sendmmsg_partial: int = 0  # batches the kernel took only part of (the rest: sendto)
    send_failed: int = 0  # datagrams not sent: a full socket buffer, an unreachable address
    compiled_sent: int = 0  # of ``sent``: RTP staged and sent by the compiled send path
    fast_received: int = 0  # of ``routed_by_address``: taken by an endpoint's fast_receive
    polled_reads: int = 0  # read bursts run by the shared ticker's fires (``poll_sockets``)

    def as_json(self) -> dict[str, int]:
        return asdict(self)


class _Closed:
    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        pass


_CLOSED = _Closed()

#: Shared sockets with datagrams queued and not yet sent (``flush_pending`` sends them).
_PENDING: set[UdpMux] = set()


def flush_pending() -> None:
    """Send what every shared socket has queued. The shared ticker calls it at the end of each
    tick, so a tick's packets leave with its last callback, not one loop iteration later behind
    whatever else was ready (measured, 100 listeners + 4 talkers: 2.7 % of the batches waited
    over 5 ms for the ``call_soon`` flush while the talkers talked)."""
    for mux in tuple(_PENDING):
        mux.flush()


#: Every shared socket of a loop (``poll_sockets`` and ``read_polled`` work on them).
_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[UdpMux]] = (
    weakref.WeakKeyDictionary())
_POLLED: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()  # (a socket bound
# meanwhile starts polled)


def poll_sockets(loop: asyncio.AbstractEventLoop, polled: bool) -> None:
    """``polled``: take the loop's shared sockets off its selector -- a datagram then waits in
    the socket for ``read_polled``, which the shared ticker's fires call (``--coalesce-ms``:
    one loop wake-up for what came during a grid tick, not one for each); else read each the
    moment it is readable again (and at once: what waits in it now is read in the next
    iteration)."""
    if polled:
        _POLLED.add(loop)
    else:
        _POLLED.discard(loop)
    for mux in tuple(_BY_LOOP.get(loop, ())):
        mux.set_polled(polled)


class _Endpoints:
    """Bumped whenever a shared socket gains or loses an endpoint (a session): the shared
    ticker counts its loop's sessions again (``sessions``) only then, not at every fire."""

    __slots__ = ("version",)

    def __init__(self) -> None:
        self.version = 0


ENDPOINTS = _Endpoints()


def sessions(loop: asyncio.AbstractEventLoop) -> int:
    """The sessions the loop's shared sockets serve (the shared ticker packs below a number)."""
    return sum(mux._stats.endpoints for mux in tuple(_BY_LOOP.get(loop, ())))


def read_polled(loop: asyncio.AbstractEventLoop) -> None:
    """Read the loop's polled shared sockets dry (``poll_sockets``)."""
    for mux in tuple(_BY_LOOP.get(loop, ())):
        if mux.polled:
            mux._stats.polled_reads += 1
            mux._on_readable(False)


class _AfterReads:
    """What each loop runs at the end of a socket read burst (``after_reads``)."""

    version = 0  # bumped by every registration: a mux looks its loop's hook up again
    by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                       weakref.WeakMethod[Callable[[], None]]] = (
        weakref.WeakKeyDictionary())


def after_reads(loop: asyncio.AbstractEventLoop, hook: Callable[[], None]) -> None:
    """Call ``hook()`` (a bound method, held weakly) when a shared socket of ``loop`` has been
    read dry: the shared ticker's ``fire_if_due``, so a tick due then runs in the iteration
    that read the datagrams instead of waking the loop again (one ``select`` less)."""
    _AfterReads.by_loop[loop] = weakref.WeakMethod(hook)  # type: ignore[arg-type]
    _AfterReads.version += 1


#: An endpoint's fast path for datagrams routed by address: True when it took the datagram
#: (the receiver then never sees it), False to let the receiver have it as usual.
FastReceive = Callable[[bytes], bool]
#: An endpoint's handler of the STUN messages routed to it, from their bytes (a connected
#: session's: it answers the peer's consent checks and takes the responses to its own): True
#: when it dealt with the message itself, False to let the receiver have it.
AnswerStun = Callable[[bytes, Address], bool]


class MuxEndpoint(asyncio.DatagramTransport):
    """One session's view of the shared socket (what aioice's protocol calls its transport)."""

    def __init__(self, mux: UdpMux, receiver: DatagramReceiver, ufrag: str) -> None:
        super().__init__()
        self.mux = mux
        self.receiver = receiver
        self.ufrags: list[str] = [ufrag]
        self.addresses: set[Address] = set()
        self.closing = False  # (read directly by the compiled send path, per packet)
        #: Set by a connected session (SRTP straight from the read loop); None: the receiver
        self.fast_receive: FastReceive | None = None
        #: Set by a connected session: answers a plain consent check, or takes the response to
        #: one of its own, from the bytes (True: it did); None, or False from it: the receiver
        #: gets the message
        self.answer_stun: AnswerStun | None = None

    # asyncio.DatagramTransport

    def sendto(self, data: bytes, addr: Any = None) -> None:  # type: ignore[override]
        if self.closing or addr is None:
            return
        self.mux.sendto(self, data, (addr[0], addr[1]))

    def send_batched(self, data: bytes, addr: Address) -> None:
        """Queue ``data`` for ``addr``: it leaves with the rest of this callback's datagrams."""
        if not self.closing:
            self.mux.queue(data, addr)

    def is_closing(self) -> bool:
        return self.closing

    def stun_received(self, data: bytes, source: Address) -> None:
        """A STUN message routed here: to ``answer_stun`` first, else to the receiver."""
        answer = self.answer_stun
        if answer is None or not answer(data, source):
            self.receiver.datagram_received(data, source)

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.fast_receive = None  # it holds the session's objects (weakly): gone with it
        self.answer_stun = None
        self.mux.detach(self)
        self.mux.loop.call_soon(self._lost)

    def _lost(self) -> None:
        receiver, self.receiver = self.receiver, _CLOSED  # no cycle left with the protocol
        receiver.connection_lost(None)

    def abort(self) -> None:
        self.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "sockname":
            return self.mux.local_address
        if name == "peername":
            return None
        return default  # no "socket": it is not this endpoint's to configure

    def add_ufrag(self, ufrag: str) -> None:
        """An ICE restart: requests for ``ufrag`` reach this endpoint too (the latest two)."""
        self.mux.add_ufrag(self, ufrag)


class UdpMux:
    """The shared socket of one local address and its routing tables.

    It reads its own non-blocking socket (``loop.add_reader``) until it is empty (at most
    ``MAX_READS`` datagrams per wake-up): asyncio's and uvloop's datagram transports read one
    (uvloop: 32) per event-loop iteration, which one socket carrying every session's traffic
    outgrows under load -- responses then wait in the socket behind the timers that expire
    them (measured: consent checks failing at 500 streams on a busy core).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._stats = MuxStats()
        self.local_address: Address = ("", 0)
        self._sock: socket.socket | None = None
        self._by_ufrag: dict[str, MuxEndpoint] = {}
        self._by_address: dict[Address, MuxEndpoint] = {}
        self._by_transaction: OrderedDict[bytes, MuxEndpoint] = OrderedDict()
        self._batch: list[bytes] = []
        self._batch_addresses: list[Address] = []
        self._names: dict[Address, tuple[Any, int] | None] = {}
        self._batch_socket: sendmmsg.BatchSocket | None = None
        self.use_sendmmsg = True
        #: The compiled send path's staging arena (None: the Python path)
        self.compiled_batch: sendpath.CompiledBatch | None = None
        self._compiled_seen = (0, 0, 0, 0)  # its counters at the last take (calls, sent, ...)
        self._after_reads: Callable[[], None] | None = None  # (``after_reads``: its loop's)
        self._after_version = -1
        self.polled = False  # off the selector: read by the shared ticker's fires

    @property
    def stats(self) -> MuxStats:
        """The socket's counters, with what the compiled send path counted taken first: its
        flushes (one a tick) only send, and its counters are read here, when asked for."""
        compiled = self.compiled_batch
        if compiled is not None:
            self._take_compiled(compiled)
        return self._stats

    @classmethod
    async def bind(
        cls, host: str, port: int = 0, use_sendmmsg: bool = True,
        compiled: tuple[Any, int, int] | None = None,
    ) -> UdpMux:
        """``compiled``: (the sendpath module, srtp_protect's address, SRTP's trailer length)
        to stage RTP in a ``CompiledBatch``; None: the Python path."""
        loop = asyncio.get_running_loop()
        mux = cls(loop)
        mux.use_sendmmsg = use_sendmmsg
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
                except OSError:
                    pass
            sock.bind((host, port))
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        mux._sock = sock
        name = sock.getsockname()
        mux.local_address = (name[0], name[1])
        if use_sendmmsg and sendmmsg.available():
            mux._batch_socket = sendmmsg.BatchSocket(sock.fileno())
        if compiled is not None and use_sendmmsg:
            module, protect_address, trailer = compiled
            mux.compiled_batch = sendpath.CompiledBatch(module, sock.fileno(), protect_address,
                                                        trailer)
        loop.add_reader(sock.fileno(), mux._on_readable)
        _BY_LOOP.setdefault(loop, weakref.WeakSet()).add(mux)
        ENDPOINTS.version += 1
        mux.set_polled(loop in _POLLED)
        return mux

    def set_polled(self, polled: bool) -> None:
        """Off the loop's selector (``polled``) or back on it (``poll_sockets``)."""
        if polled == self.polled or self._sock is None:
            return
        self.polled = polled
        if polled:
            self.loop.remove_reader(self._sock.fileno())
        else:
            self.loop.add_reader(self._sock.fileno(), self._on_readable)

    def _on_readable(self, after: bool = True) -> None:
        """Read the socket dry (at most ``MAX_READS``); then, ``after``, the loop's after-reads
        hook (the ticker's ``fire_if_due``; not when a ticker's fire is the reader)."""
        sock = self._sock
        if sock is None:
            return
        recvfrom = sock.recvfrom
        received = self.datagram_received
        for _ in range(MAX_READS):
            try:
                data, addr = recvfrom(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                if not after:
                    return
                if self._after_version != _AfterReads.version:
                    self._find_after_reads()
                hook = self._after_reads
                if hook is not None:
                    try:
                        hook()
                    except Exception:  # (the hook's own failure: the socket reads on)
                        log.exception("udp mux: the after-reads hook failed")
                return
            except OSError as exc:  # an ICMP error reported on the socket: read on
                self._stats.read_errors += 1
                log.debug("udp mux %s: %s", self.local_address, exc)
                continue
            try:
                received(data, addr)
            except Exception:  # one session's failure must not stop the socket
                log.exception("udp mux: a datagram's receiver failed")

    def _find_after_reads(self) -> None:
        self._after_version = _AfterReads.version
        ref = _AfterReads.by_loop.get(self.loop)
        self._after_reads = ref() if ref is not None else None

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        source: Address = (addr[0], addr[1])
        stats = self._stats
        stats.received += 1
        if not data:  # nothing's: aiortc's DTLS task reads data[0] and would end the session
            stats.dropped_empty += 1
            return
        endpoint: MuxEndpoint | None
        unknown_ufrag = False
        if data[0] < 4 and is_stun(data):
            if stun_class(data) == REQUEST:
                ufrag = local_ufrag(data)
                endpoint = self._by_ufrag.get(ufrag) if ufrag is not None else None
                if endpoint is not None:
                    self._bind_address(endpoint, source)
                    stats.routed_by_ufrag += 1
                    endpoint.stun_received(data, source)
                    return
                unknown_ufrag = True
            else:
                endpoint = self._by_transaction.pop(transaction_id(data), None)
                if endpoint is not None and not endpoint.is_closing():
                    stats.routed_by_transaction += 1
                    endpoint.stun_received(data, source)
                    return
                stats.transaction_misses += 1
        endpoint = self._by_address.get(source)
        if endpoint is None:
            stats.dropped_unknown += 1
            if unknown_ufrag:
                stats.unknown_ufrag += 1
            else:
                stats.unknown_source += 1
            return
        stats.routed_by_address += 1
        fast = endpoint.fast_receive
        if fast is not None and fast(data):
            stats.fast_received += 1
            return
        endpoint.receiver.datagram_received(data, source)

    # endpoints

    def attach(self, receiver: DatagramReceiver, ufrag: str) -> MuxEndpoint:
        """A transport for ``receiver``, reached by STUN requests for ``ufrag``."""
        if self._sock is None:
            raise ConnectionError("the UDP mux is not bound")
        if ufrag in self._by_ufrag:
            raise ValueError(f"ufrag {ufrag!r} is already served by this socket")
        endpoint = MuxEndpoint(self, receiver, ufrag)
        self._by_ufrag[ufrag] = endpoint
        self._stats.endpoints += 1
        ENDPOINTS.version += 1
        return endpoint

    def add_ufrag(self, endpoint: MuxEndpoint, ufrag: str) -> None:
        if endpoint.is_closing() or ufrag in endpoint.ufrags:
            return
        owner = self._by_ufrag.get(ufrag)
        if owner is not None and owner is not endpoint:
            raise ValueError(f"ufrag {ufrag!r} is already served by this socket")
        endpoint.ufrags.append(ufrag)
        self._by_ufrag[ufrag] = endpoint
        while len(endpoint.ufrags) > MAX_UFRAGS_PER_ENDPOINT:
            old = endpoint.ufrags.pop(0)
            if self._by_ufrag.get(old) is endpoint:
                del self._by_ufrag[old]

    def owner_of(self, ufrag: str) -> MuxEndpoint | None:
        return self._by_ufrag.get(ufrag)

    def detach(self, endpoint: MuxEndpoint) -> None:
        """Forget every entry of ``endpoint`` (its transactions lapse: they name a closed one)."""
        for ufrag in endpoint.ufrags:
            if self._by_ufrag.get(ufrag) is endpoint:
                del self._by_ufrag[ufrag]
        for address in endpoint.addresses:
            if self._by_address.get(address) is endpoint:
                del self._by_address[address]
                self._names.pop(address, None)
        self._stats.addresses -= len(endpoint.addresses)
        endpoint.addresses.clear()
        self._stats.endpoints -= 1
        ENDPOINTS.version += 1

    def _bind_address(self, endpoint: MuxEndpoint, address: Address) -> None:
        owner = self._by_address.get(address)
        if owner is endpoint:
            return
        if len(endpoint.addresses) >= MAX_ADDRESSES_PER_ENDPOINT:
            self._stats.refused_addresses += 1
            return
        if owner is not None:  # the address now checks another session: it moved there
            owner.addresses.discard(address)
            self._stats.addresses -= 1
        self._by_address[address] = endpoint
        endpoint.addresses.add(address)
        self._stats.addresses += 1

    @property
    def entries(self) -> dict[str, int]:
        return {"ufrags": len(self._by_ufrag), "addresses": len(self._by_address),
                "transactions": len(self._by_transaction)}

    # sending

    def sendto(self, endpoint: MuxEndpoint, data: bytes, addr: Address) -> None:
        if data and data[0] < 4 and is_stun(data) and stun_class(data) == REQUEST:
            table = self._by_transaction
            table[transaction_id(data)] = endpoint
            if len(table) > MAX_TRANSACTIONS:
                table.popitem(last=False)
        self._stats.sent += 1
        self._sendto(data, addr)

    def _sendto(self, data: bytes, addr: Address) -> None:
        sock = self._sock
        if sock is None:
            self._stats.send_failed += 1
            return
        try:
            sock.sendto(data, addr)
        except OSError:  # a full socket buffer (UDP: dropped), an unreachable address
            self._stats.send_failed += 1

    def queue(self, data: bytes, addr: Address) -> None:
        """Send ``data`` with the rest of the batch: at the end of the shared ticker's tick
        (``flush_pending``), or in the next loop iteration if no tick comes first."""
        self._batch.append(data)
        self._batch_addresses.append(addr)
        if self not in _PENDING:  # the batch's first datagram
            _PENDING.add(self)
            self.loop.call_soon(self.flush)
        elif len(self._batch) >= sendmmsg.MAX_BATCH:
            self.flush()

    def staged(self, flushed_by_caller: bool = False) -> None:
        """The compiled path staged this socket's first datagram since the last flush.
        ``flushed_by_caller``: the caller runs ``flush_pending`` before it returns to the loop
        (the end-of-tick hook, webrtc/in_c.py), so no ``call_soon`` flush as a backstop: it
        found nothing to send and cost a loop iteration (a ``select`` call) of its own, about
        every other tick of a talker (docs/density.md, "A talker's period, third pass")."""
        if self not in _PENDING:
            _PENDING.add(self)
            if not flushed_by_caller:
                self.loop.call_soon(self.flush)

    def _flush_compiled(self, compiled: sendpath.CompiledBatch) -> None:
        if self._sock is None:
            compiled.discard()
            return
        compiled.flush_c(compiled.ptr)  # (its counters are taken when ``stats`` is read)

    def _take_compiled(self, compiled: sendpath.CompiledBatch) -> None:
        """Add what the compiled batch counted since the last take to the counters."""
        c = compiled.counters()
        calls, sent, failed, batches = self._compiled_seen
        self._compiled_seen = (c["calls"], c["sent"], c["failed"] + c["skipped"], c["batches"])
        new_sent = c["sent"] - sent
        new_failed = c["failed"] + c["skipped"] - failed
        stats = self._stats
        stats.sent += new_sent + new_failed
        stats.compiled_sent += new_sent
        stats.batches += c["batches"] - batches
        stats.batched += new_sent + new_failed
        stats.sendmmsg_calls += c["calls"] - calls
        stats.send_failed += new_failed

    def flush(self) -> None:
        """Send every queued datagram now."""
        _PENDING.discard(self)
        compiled = self.compiled_batch
        if compiled is not None:
            self._flush_compiled(compiled)
        batch, addresses = self._batch, self._batch_addresses
        if not batch:
            return
        self._batch, self._batch_addresses = [], []
        n = len(batch)
        self._stats.sent += n
        self._stats.batches += 1
        self._stats.batched += n
        sent = 0
        batch_socket = self._batch_socket
        if batch_socket is not None and self._sock is not None:
            names = self._names
            resolved = []
            for address in addresses:
                name = names.get(address)
                if name is None:
                    name = names[address] = sendmmsg.sockaddr(address)
                    if name is None:
                        break
                resolved.append(name)
            if len(resolved) == n:
                calls, skipped = batch_socket.calls, batch_socket.skipped
                sent = batch_socket.send(batch, resolved)
                self._stats.sendmmsg_calls += batch_socket.calls - calls
                self._stats.send_failed += batch_socket.skipped - skipped
                if sent < n:
                    self._stats.sendmmsg_partial += 1
        sendto = self._sendto
        for i in range(sent, n):  # no sendmmsg, or it stopped short: one by one
            sendto(batch[i], addresses[i])

    def kernel_drops(self) -> int:
        """Datagrams the kernel dropped on this socket (its receive buffer full): the ``drops``
        column of /proc/net/udp[6] (0 where it cannot be read)."""
        sock = self._sock
        if sock is None:
            return 0
        try:
            inode = str(os.fstat(sock.fileno()).st_ino)
            table = "/proc/net/udp6" if sock.family == socket.AF_INET6 else "/proc/net/udp"
            with open(table) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 12 and fields[9] == inode:
                        return int(fields[12])
        except (OSError, ValueError):
            pass
        return 0

    def close(self) -> None:
        """Close the socket; every session still on it sees its transport lost."""
        if self.compiled_batch is not None:
            self.compiled_batch.close()  # its parked streams too: the descriptor may be reused
        sock, self._sock = self._sock, None
        _PENDING.discard(self)
        if sock is None:
            return
        if not self.polled:
            self.loop.remove_reader(sock.fileno())
        sock.close()
        self._batch_socket = None
        for endpoint in list(self._by_ufrag.values()) + list(self._by_address.values()):
            endpoint.close()


class MuxGroup:
    """A worker's shared sockets: one per host address, all on the same port (port 0: the
    first gets a free one, the others take the same number)."""

    def __init__(
        self, hosts: list[str], port: int, use_sendmmsg: bool = True,
        compiled: tuple[Any, int, int] | None = None, send_path_reason: str = "",
    ) -> None:
        """``compiled``: see ``UdpMux.bind`` (None: the Python send path, for
        ``send_path_reason``, shown in /healthz)."""
        self.hosts = hosts
        self.port = port
        self.use_sendmmsg = use_sendmmsg
        self.compiled = compiled
        self.send_path_reason = send_path_reason
        self.muxes: dict[str, UdpMux] = {}

    @property
    def send_path(self) -> str:
        """``compiled`` when every shared socket stages in C, else ``python``."""
        if self.muxes and all(m.compiled_batch is not None for m in self.muxes.values()):
            return "compiled"
        return "python"

    async def start(self) -> None:
        port = self.port
        for host in self.hosts:
            try:
                mux = await UdpMux.bind(host, port, self.use_sendmmsg, self.compiled)
            except OSError as exc:
                if not self.muxes and host == self.hosts[-1]:
                    raise
                log.warning("UDP mux: could not bind %s:%d (%s)", host, port, exc)
                continue
            self.muxes[host] = mux
            port = mux.local_address[1]
        if not self.muxes:
            raise OSError("UDP mux: no host address to bind")
        self.port = port
        log.info("UDP mux: one socket per host address on port %d (%s); send path: %s%s", port,
                 ", ".join(self.hosts), self.send_path,
                 f" ({self.send_path_reason})" if self.send_path_reason else "")

    def get(self, host: str) -> UdpMux | None:
        return self.muxes.get(host)

    def stats(self) -> dict[str, Any]:
        total = MuxStats()
        for mux in self.muxes.values():
            for name, value in mux.stats.as_json().items():
                setattr(total, name, getattr(total, name) + value)
        drops = sum(mux.kernel_drops() for mux in self.muxes.values())
        return {"port": self.port, "sockets": len(self.muxes), **total.as_json(),
                "kernel_drops": drops, "send_path": self.send_path,
                "send_path_reason": self.send_path_reason}

    def close(self) -> None:
        for mux in self.muxes.values():
            mux.close()
        self.muxes.clear()
