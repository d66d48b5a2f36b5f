"""aiortc's per-session ``asyncio.Event``s made lazy (issue 28's memory lever).

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
check list's state, the data it receives): with the caller's ``slim_queue`` each loses its
idle deques (≈ 1.2 KB).
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from aiortc import RTCPeerConnection, RTCRtpReceiver, RTCRtpSender

from gateway.aiortc_compat._common import _ice_connections
from gateway.aiortc_compat.teardown import peer_connection_transports

SENDER_EVENTS = ("_RTCRtpSender__rtp_started", "_RTCRtpSender__rtp_exited",
                 "_RTCRtpSender__rtcp_started", "_RTCRtpSender__rtcp_exited")
RECEIVER_EVENTS = ("_RTCRtpReceiver__rtcp_started", "_RTCRtpReceiver__rtcp_exited")
ICE_EVENTS = ("_RTCIceTransport__start",)  # None until ``start``
ICE_QUEUES = ("_check_list_state", "_queue")  # aioice Connection's: unbounded asyncio.Queues
RECEIVER_STARTED = "_RTCRtpReceiver__started"
RECEIVER_DECODER = ("_RTCRtpReceiver__decoder_queue", "_RTCRtpReceiver__decoder_error")
_RECEIVE_WRAPPED = "_gateway_idle_receiver_wrapped"


def _lazy_problems() -> list[str]:
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
    return problems


def lazy_events(pc: RTCPeerConnection, make_lazy: Callable[[asyncio.Event], bool],
                slim_queue: Callable[[asyncio.Queue[Any]], bool] | None = None) -> int:
    """Each of ``pc``'s sender, receiver and ICE transport Events that nobody waits on, made
    lazy by ``make_lazy``, and each never-started receiver's decoder queue dropped
    (``idle_receiver``), and with ``slim_queue`` aioice's two queues slimmed; the number of
    objects made lazy, dropped or slimmed."""
    made = 0
    for transceiver in pc.getTransceivers():
        made += idle_receiver(transceiver.receiver)
        parts: list[tuple[RTCRtpSender | RTCRtpReceiver, tuple[str, ...]]] = [
            (transceiver.sender, SENDER_EVENTS), (transceiver.receiver, RECEIVER_EVENTS)]
        for obj, names in parts:
            for name in names:
                event = getattr(obj, name, None)
                if isinstance(event, asyncio.Event) and make_lazy(event):
                    made += 1
    for transport in peer_connection_transports(pc):
        for name in ICE_EVENTS:
            event = getattr(transport, name, None)
            if isinstance(event, asyncio.Event) and make_lazy(event):
                made += 1
    if slim_queue is not None:
        for connection in _ice_connections(pc, ICE_QUEUES):
            for name in ICE_QUEUES:
                q = getattr(connection, name)
                if isinstance(q, asyncio.Queue) and slim_queue(q):
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
