"""What a session keeps, made smaller (issue 28's memory): a connected session's aiortc Events
are lazy, its idle receiver has no decoder queue, aioice's queues are slimmed, its DTLS
certificate is the process's; and nothing a peer or the gateway does changes: media flows, the
session closes, a receiver started later still decodes, a day-old certificate is renewed."""

from __future__ import annotations

import asyncio
import gc

import numpy as np
import pytest
from aiortc import RTCPeerConnection

from gateway.aiortc_compat import memory as lazy
from gateway.runtime.lazy_event import Fifo, LazyEvent, asyncio_problems, make_lazy, slim_queue


async def connected_session(gateway):
    session = next(iter(gateway.registry))
    await asyncio.wait_for(session.webrtc.connected.wait(), timeout=5)
    return session


async def test_a_listener_session_is_slimmed_and_still_streams_and_closes(connect, gateway):
    client = await connect()
    session = await connected_session(gateway)
    transceiver = session.webrtc.pc.getTransceivers()[0]
    for name in lazy.SENDER_EVENTS:
        assert type(getattr(transceiver.sender, name)) is LazyEvent, name
    for name in lazy.RECEIVER_EVENTS:
        assert type(getattr(transceiver.receiver, name)) is LazyEvent, name
    for name in lazy.RECEIVER_DECODER:  # a recvonly offer: the gateway's receiver never starts
        assert getattr(transceiver.receiver, name) is None, name
    connection = transceiver.sender.transport.transport._connection
    for name in lazy.ICE_QUEUES:
        assert getattr(connection, name)._putters == (), name
        assert type(getattr(connection, name)._queue) is Fifo, name
    assert getattr(connection, lazy.ICE_EARLY_CHECKS[0]) == ()  # connect() has run them
    result = await client.say("hi", voice="tone")
    done = await client.wait_utterance(result.utterance["id"])
    assert done["state"] == "done"
    await client.close()  # the gateway's side closes too: the sender's stop waits on its Events
    await asyncio.wait_for(session.closed.wait(), timeout=5)


async def test_a_duplex_session_keeps_its_started_receiver(start_gateway):
    from gateway.client.peer import GatewayClient
    from gateway.testing.mic_track import RecordedMic

    gateway = await start_gateway(duplex=True)
    client = GatewayClient(gateway.url, gateway.http)
    await client.connect(mic=RecordedMic(np.zeros(0, dtype=np.int16), 24_000))
    try:
        session = await connected_session(gateway)
        receiver = session.webrtc.pc.getTransceivers()[0].receiver
        assert getattr(receiver, lazy.RECEIVER_STARTED) is True
        assert getattr(receiver, lazy.RECEIVER_DECODER[0]) is not None  # left alone
    finally:
        await client.close()


async def test_an_idle_receiver_started_later_gets_its_queue_back():
    pc = RTCPeerConnection()
    try:
        receiver = pc.addTransceiver("audio", direction="sendrecv").receiver
        assert lazy.idle_receiver(receiver)
        assert getattr(receiver, lazy.RECEIVER_DECODER[0]) is None
        # receive() remakes them before its own body runs (which then needs a real transport)
        with pytest.raises(Exception):  # noqa: B017 - a never-negotiated receiver cannot start
            await receiver.receive(None)  # type: ignore[arg-type]
        assert getattr(receiver, lazy.RECEIVER_DECODER[0]) is not None
        assert getattr(receiver, lazy.RECEIVER_DECODER[1]) is not None
    finally:
        await pc.close()


async def test_lazy_event_is_an_event_with_no_deque_until_waited():
    event = LazyEvent()
    assert isinstance(event, asyncio.Event) and not event.is_set()
    assert not hasattr(event._waiters, "append")  # no deque yet
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.sleep(0)
    assert len(event._waiters) == 1
    event.set()
    assert await waiter is True
    assert not hasattr(event._waiters, "append")  # dropped with its last waiter
    event.clear()
    cancelled = asyncio.ensure_future(event.wait())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert not event._waiters and not event.is_set()


async def test_make_lazy_keeps_the_state_and_refuses_a_waited_event():
    done = asyncio.Event()
    done.set()
    assert make_lazy(done) and type(done) is LazyEvent and done.is_set()
    assert await done.wait() is True
    waited = asyncio.Event()
    waiter = asyncio.ensure_future(waited.wait())
    await asyncio.sleep(0)
    assert not make_lazy(waited)  # someone waits: left as it is
    waited.set()
    await waiter
    assert not make_lazy(LazyEvent())  # already lazy
    gc.collect()


def test_the_asyncio_internals_are_where_they_were():
    assert asyncio_problems() == []


async def test_a_slimmed_queue_still_queues_and_joins():
    q: asyncio.Queue[int] = asyncio.Queue()
    assert slim_queue(q)
    getter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.put_nowait(1)
    await q.put(2)  # never blocks: unbounded
    assert await getter == 1 and q.get_nowait() == 2
    q.task_done()
    joined = asyncio.ensure_future(q.join())
    await asyncio.sleep(0)
    assert not joined.done()
    q.task_done()
    await asyncio.wait_for(joined, 1)
    assert not slim_queue(asyncio.Queue(4))  # bounded: its putters may wait


async def test_a_queue_slimmed_with_getters_waiting_keeps_their_order_and_its_items():
    q: asyncio.Queue[int] = asyncio.Queue()
    q.put_nowait(0)
    assert q.get_nowait() == 0
    first, cut, second = (asyncio.ensure_future(q.get()) for _ in range(3))
    await asyncio.sleep(0)
    assert slim_queue(q) and type(q._getters) is Fifo and len(q._getters) == 3
    cut.cancel()
    await asyncio.sleep(0)
    assert len(q._getters) == 2  # a cancelled getter removes itself
    for item in (1, 2, 3):
        q.put_nowait(item)
    assert await asyncio.wait_for(first, 1) == 1 and await asyncio.wait_for(second, 1) == 2
    assert q.qsize() == 1 and q.get_nowait() == 3 and q.empty()
    assert slim_queue(q)  # again: nothing to move


async def test_sessions_share_the_process_certificate(connect, gateway):
    first, second = await connect(), await connect()
    def fingerprints(client) -> set[str]:
        return {line for line in client.pc.remoteDescription.sdp.splitlines()
                if line.startswith("a=fingerprint")}

    assert fingerprints(first) and fingerprints(first) == fingerprints(second)
    certificates = {id(getattr(s.webrtc.pc, lazy.PC_CERTIFICATES)[0]) for s in gateway.registry}
    assert len(certificates) == 1
    result = await second.say("hi", voice="tone")
    assert (await second.wait_utterance(result.utterance["id"]))["state"] == "done"


def test_the_process_certificate_is_renewed_once_a_day_old():
    import datetime

    now = datetime.datetime.now(datetime.UTC)
    cert = lazy.process_certificate(now)
    assert lazy.process_certificate(now + datetime.timedelta(hours=23)) is cert
    renewed = lazy.process_certificate(now + lazy.CERTIFICATE_RENEW_AFTER)
    assert renewed is not cert
    assert renewed.expires - now > datetime.timedelta(days=29)  # aiortc's: 30 days


async def test_share_certificate_refuses_a_peer_connection_with_transports():
    pc = RTCPeerConnection()
    try:
        pc.addTransceiver("audio", direction="sendonly")
        with pytest.raises(RuntimeError):
            lazy.share_certificate(pc)
    finally:
        await pc.close()
