"""What an aiortc session keeps, made smaller (issue 28's memory lever): lazy Events, an idle
receiver without its decoder queue, aioice's queues slimmed, one DTLS certificate per process.

An ``asyncio.Event`` makes a 624-byte deque at construction. Each session's sender has four
(its RTP and RTCP tasks started / exited: waited only by ``stop``), its receiver two (its RTCP
task: never started for a send-only transceiver) and its ICE transport one (``start``, waited
once). ``lazy_events`` turns every one of them that nobody waits on into the caller's lazy
Event (``gateway.runtime.lazy_event.make_lazy``, passed in: this layer does not import the
runtime's) in place: same object, same state, the deque made again only by a ``wait``.

``idle_receiver`` does the same for a receiver that was never started (a send-only
transceiver's: a WHEP listener's, the load bench's): its decoder thread's ``queue.Queue``
(a lock, three ``threading.Condition``s and their deques) and ``threading.Event`` (≈ 5 KB) are
dropped, and made again by ``RTCRtpReceiver.receive`` (wrapped once, process-wide) if a later
negotiation ever starts it. aioice's connection has two unbounded ``asyncio.Queue``s (its
check list's state, the data it receives): with the caller's ``slim_queue`` each keeps no
deque (≈ 2.7 KB a queue), and its bounded deque of checks that came before ``connect`` had the
peer's password (``_early_checks``: emptied by ``connect`` and never read again) is dropped
(0.7 KB).

``share_certificate``: aiortc makes a DTLS certificate (an EC key and a self-signed X.509) for
every peer connection, ≈ 6.4 KB of OpenSSL memory each. The gateway's sessions share one per
process instead, as mediasoup's workers and browsers' origins do (the peer checks only the
fingerprint the answer carries), made anew once it is a day old: aiortc's certificates are
valid for 30 days, and a session keeps the one it started with.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from aiortc import RTCCertificate, RTCPeerConnection, RTCRtpReceiver

from gateway.aiortc_compat._common import _ice_connections
from gateway.aiortc_compat.teardown import peer_connection_transports

SENDER_EVENTS = ("_RTCRtpSender__rtp_started", "_RTCRtpSender__rtp_exited",
                 "_RTCRtpSender__rtcp_started", "_RTCRtpSender__rtcp_exited")
RECEIVER_EVENTS = ("_RTCRtpReceiver__rtcp_started", "_RTCRtpReceiver__rtcp_exited")
ICE_EVENTS = ("_RTCIceTransport__start",)  # None until ``start``
ICE_QUEUES = ("_check_list_state", "_queue")  # aioice Connection's: unbounded asyncio.Queues
#: aioice Connection's deque of checks held until ``connect``, and "connect has run them"
ICE_EARLY_CHECKS = ("_early_checks", "_early_checks_done")
RECEIVER_STARTED = "_RTCRtpReceiver__started"
RECEIVER_DECODER = ("_RTCRtpReceiver__decoder_queue", "_RTCRtpReceiver__decoder_error")
_RECEIVE_WRAPPED = "_gateway_idle_receiver_wrapped"
PC_CERTIFICATES = "_RTCPeerConnection__certificates"
CERTIFICATE_RENEW_AFTER = datetime.timedelta(days=1)
_shared: list[tuple[RTCCertificate, datetime.datetime]] = []  # the process's, and when made


def _memory_problems() -> list[str]:
    """check_internals' part: the events are where this module looks for them (a probe peer
    connection, in a loop of its own when none runs: aiortc asks for the current one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(_probe_closed())
        finally:
            loop.close()
    return _probe(RTCPeerConnection())


async def _probe_closed() -> list[str]:
    pc = RTCPeerConnection()
    try:
        return _probe(pc)
    finally:
        await pc.close()


def _probe(pc: RTCPeerConnection) -> list[str]:
    problems: list[str] = []
    certificates = getattr(pc, PC_CERTIFICATES, None)
    if not (isinstance(certificates, list) and certificates
            and all(isinstance(c, RTCCertificate) for c in certificates)):
        problems.append(f"RTCPeerConnection.{PC_CERTIFICATES}")
    transceiver = pc.addTransceiver("audio", direction="sendonly")
    for obj, names in ((transceiver.sender, SENDER_EVENTS),
                       (transceiver.receiver, RECEIVER_EVENTS)):
        for name in names:
            if not isinstance(getattr(obj, name, None), asyncio.Event):
                problems.append(f"{type(obj).__name__}.{name}")
    receiver = transceiver.receiver
    if getattr(receiver, RECEIVER_STARTED, None) is not False:
        problems.append(f"RTCRtpReceiver.{RECEIVER_STARTED}")
    if not isinstance(getattr(receiver, RECEIVER_DECODER[0], None), queue.Queue):
        problems.append(f"RTCRtpReceiver.{RECEIVER_DECODER[0]}")
    if not isinstance(getattr(receiver, RECEIVER_DECODER[1], None), threading.Event):
        problems.append(f"RTCRtpReceiver.{RECEIVER_DECODER[1]}")
    ice = transceiver.sender.transport.transport
    for name in ICE_EVENTS:
        if not hasattr(ice, name):
            problems.append(f"RTCIceTransport.{name}")
    connection = getattr(ice, "_connection", None)
    for name in ICE_QUEUES:
        if not isinstance(getattr(connection, name, None), asyncio.Queue):
            problems.append(f"aioice.Connection.{name}")
    checks, done = ICE_EARLY_CHECKS
    if not isinstance(getattr(connection, checks, None), collections.deque):
        problems.append(f"aioice.Connection.{checks}")
    if getattr(connection, done, None) is not False:  # False until connect() has run them
        problems.append(f"aioice.Connection.{done}")
    return problems


def lazy_events(pc: RTCPeerConnection, make_lazy: Callable[[asyncio.Event], bool],
                slim_queue: Callable[[asyncio.Queue[Any]], bool]) -> int:
    """Each of ``pc``'s sender, receiver and ICE transport Events that nobody waits on, made
    lazy by ``make_lazy``, each never-started receiver's decoder queue dropped
    (``idle_receiver``), aioice's two queues slimmed by ``slim_queue`` and its early checks'
    deque dropped once ``connect`` has run them; the number of objects made lazy, dropped or
    slimmed."""
    made = 0
    for transceiver in pc.getTransceivers():
        made += idle_receiver(transceiver.receiver)
        made += _made_lazy(transceiver.sender, SENDER_EVENTS, make_lazy)
        made += _made_lazy(transceiver.receiver, RECEIVER_EVENTS, make_lazy)
    for transport in peer_connection_transports(pc):
        made += _made_lazy(transport, ICE_EVENTS, make_lazy)
    for connection in _ice_connections(pc, ICE_QUEUES + ICE_EARLY_CHECKS):
        for name in ICE_QUEUES:
            q = getattr(connection, name)
            if isinstance(q, asyncio.Queue) and slim_queue(q):
                made += 1
        made += _early_checks_dropped(connection)
    return made


def _early_checks_dropped(connection: Any) -> bool:
    """aioice appends a check to ``_early_checks`` only until ``connect`` has run them (and
    set ``_early_checks_done``; an ICE restart keeps the connection): an empty tuple then."""
    checks, done = ICE_EARLY_CHECKS
    held = getattr(connection, checks)
    if getattr(connection, done) is not True or held or isinstance(held, tuple):
        return False
    setattr(connection, checks, ())
    return True


def _made_lazy(obj: object, names: tuple[str, ...],
               make_lazy: Callable[[asyncio.Event], bool]) -> int:
    """How many of ``obj``'s Events ``names`` (absent or None: skipped) ``make_lazy`` took."""
    made = 0
    for name in names:
        event = getattr(obj, name, None)
        if isinstance(event, asyncio.Event) and make_lazy(event):
            made += 1
    return made


def _wrap_receive() -> None:
    """``RTCRtpReceiver.receive`` remakes what ``idle_receiver`` dropped before it starts."""
    original = RTCRtpReceiver.receive
    if getattr(original, _RECEIVE_WRAPPED, False):
        return

    @functools.wraps(original)
    async def receive(self: RTCRtpReceiver, parameters: Any) -> None:
        if getattr(self, RECEIVER_DECODER[0], None) is None:
            setattr(self, RECEIVER_DECODER[0], queue.Queue())
            setattr(self, RECEIVER_DECODER[1], threading.Event())
        await original(self, parameters)

    setattr(receive, _RECEIVE_WRAPPED, True)
    RTCRtpReceiver.receive = receive  # type: ignore[method-assign]


def idle_receiver(receiver: RTCRtpReceiver) -> bool:
    """Drop a never-started receiver's decoder queue and error flag (see the module's
    docstring); False (left alone) if it was started."""
    if getattr(receiver, RECEIVER_STARTED, True) is not False:
        return False
    _wrap_receive()
    for name in RECEIVER_DECODER:
        setattr(receiver, name, None)
    return True


def process_certificate(now: datetime.datetime | None = None) -> RTCCertificate:
    """The certificate this process's sessions share, made anew once a day old."""
    now = now or datetime.datetime.now(datetime.UTC)
    if not _shared or now - _shared[0][1] >= CERTIFICATE_RENEW_AFTER:
        _shared[:] = [(RTCCertificate.generateCertificate(), now)]
    return _shared[0][0]


def share_certificate(pc: RTCPeerConnection) -> None:
    """``pc``'s DTLS certificate is the process's (call it before any transceiver exists: a
    DTLS transport takes the list when it is made)."""
    if not isinstance(getattr(pc, PC_CERTIFICATES, None), list):
        raise RuntimeError(f"aiortc internals moved: RTCPeerConnection has no {PC_CERTIFICATES}")
    if pc.getTransceivers():
        raise RuntimeError("share_certificate: the peer connection already has transports")
    setattr(pc, PC_CERTIFICATES, [process_certificate()])
