"""A connected peer's consent checks answered from their bytes (aiortc_compat/consent_answer.py):
the response is aioice's byte for byte, only the plain case is answered (everything else goes
to aioice), and a live session's peer keeps its consent with the gateway's checks answered."""

from __future__ import annotations

import asyncio
import itertools
import math
import os
from typing import Any

import aioice.ice
import aioice.stun as stun
import pytest
from aioice.candidate import Candidate

from gateway import aiortc_compat
from gateway.aiortc_compat import consent as consent_module
from gateway.aiortc_compat.consent_answer import ANSWERS, answer
from gateway.net import stun_fields


@pytest.mark.parametrize("address", [("127.0.0.1", 40123), ("::1", 5004)])
def test_the_response_is_aioices_byte_for_byte(address):
    key = b"lj0G6Qp9er383IAy4B7cy7wm"
    for _ in range(20):
        txid = os.urandom(12)
        theirs = stun.Message(message_method=stun.Method.BINDING,
                              message_class=stun.Class.RESPONSE, transaction_id=txid)
        theirs.attributes["XOR-MAPPED-ADDRESS"] = address
        theirs.add_message_integrity(key)
        assert stun_fields.binding_success(txid, address, key) == bytes(theirs)


class Protocol:
    """What ``answer`` reads of aioice's StunProtocol."""

    def __init__(self) -> None:
        self.local_candidate = Candidate(foundation="1", component=1, transport="udp",
                                         priority=1, host="127.0.0.1", port=1000, type="host")


PEER = ("127.0.0.1", 2000)


def connected(controlling: bool = False) -> tuple[aioice.ice.Connection, Protocol]:
    connection = aioice.ice.Connection(ice_controlling=controlling)
    connection.remote_username = "them"
    connection.remote_password = "p" * 22
    connection._early_checks_done = True
    protocol = Protocol()
    remote = Candidate(foundation="2", component=1, transport="udp", priority=1,
                       host=PEER[0], port=PEER[1], type="host")
    pair = aioice.ice.CandidatePair(protocol, remote)
    pair.state = aioice.ice.CandidatePair.State.SUCCEEDED
    connection._nominated[1] = pair
    return connection, protocol


def request(connection, *, role: str = "ICE-CONTROLLING", username: str | None = None,
            key: bytes | None = None, use_candidate: bool = False,
            method: stun.Method = stun.Method.BINDING) -> bytes:
    """A consent check as the peer sends it (aioice's own build)."""
    message = stun.Message(message_method=method, message_class=stun.Class.REQUEST)
    message.attributes["USERNAME"] = username or f"{connection.local_username}:them"
    message.attributes["PRIORITY"] = 1853817087
    message.attributes[role] = 12345
    if use_candidate:
        message.attributes["USE-CANDIDATE"] = None
    message.add_message_integrity(key or connection.local_password.encode())
    return bytes(message)


def test_a_plain_consent_check_is_answered_as_aioice_would():
    connection, protocol = connected()
    data = request(connection)
    response = answer(connection, protocol, data, PEER)
    parsed = stun.parse_message(response)
    assert parsed.message_class == stun.Class.RESPONSE
    assert parsed.transaction_id == data[8:20]
    assert parsed.attributes["XOR-MAPPED-ADDRESS"] == PEER
    assert parsed.check_message_integrity(connection.local_password.encode())
    controlling, protocol = connected(controlling=True)  # the peer is then the controlled one
    assert answer(controlling, protocol, request(controlling, role="ICE-CONTROLLED"),
                  PEER) is not None


def test_a_message_is_scanned_once_and_a_changed_buffer_again():
    """The mux reads a request's USERNAME, then the answerer the rest: the second scan of the
    same ``bytes`` is the first's; a ``bytearray`` (which can change) is scanned every time."""
    connection, _ = connected()
    data = request(connection)
    first = stun_fields.attributes(data)
    assert first is not None and stun_fields.attributes(data) is first
    assert stun_fields.attributes(bytes(bytearray(data))) == first  # equal: scanned afresh
    buffer = bytearray(data)
    assert stun_fields.attributes(buffer) == first
    at = data.index(stun_fields.USERNAME.to_bytes(2, "big")) + 4
    buffer[at] ^= 0x20  # the USERNAME's first letter's case
    assert stun_fields.attributes(buffer)[0][stun_fields.USERNAME] != first[0][
        stun_fields.USERNAME]
    assert stun_fields.attributes(data) == first


def tampered(data: bytes) -> bytes:
    """The PRIORITY's last byte changed: the integrity and the fingerprint no longer match."""
    at = data.index((0x0024).to_bytes(2, "big")) + 7
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1:]


def refused_cases(connection):
    key = connection.local_password.encode()
    return {
        "use-candidate (a nomination)": (request(connection, use_candidate=True), PEER),
        "role conflict": (request(connection, role="ICE-CONTROLLED"), PEER),
        "another ufrag": (request(connection, username="other:them"), PEER),
        "another remote ufrag": (request(connection, username=f"{connection.local_username}:x"),
                                 PEER),
        "wrong password": (request(connection, key=b"x" * 22), PEER),
        "tampered": (tampered(request(connection)), PEER),
        "another address": (request(connection), ("127.0.0.1", 2001)),
        "not a binding": (request(connection, method=stun.Method.ALLOCATE), PEER),
        "no integrity": (bytes(stun.Message(message_method=stun.Method.BINDING,
                                            message_class=stun.Class.REQUEST)), PEER),
        "(control: answered)": (request(connection, key=key), PEER),
    }


def test_everything_but_the_plain_case_goes_to_aioice():
    connection, protocol = connected()
    answered = {name: answer(connection, protocol, data, source) is not None
                for name, (data, source) in refused_cases(connection).items()}
    assert answered == {name: name.startswith("(control") for name in answered}


@pytest.mark.parametrize("state", ["closing", "before connect", "pair not succeeded",
                                   "no nominated pair", "another protocol"])
def test_a_connection_not_settled_goes_to_aioice(state):
    connection, protocol = connected()
    data = request(connection)
    assert answer(connection, protocol, data, PEER) is not None
    if state == "closing":
        connection._closing = True
    elif state == "before connect":
        connection._early_checks_done = False
    elif state == "pair not succeeded":
        connection._nominated[1].state = aioice.ice.CandidatePair.State.IN_PROGRESS
    elif state == "no nominated pair":
        connection._nominated.clear()
    else:
        protocol = Protocol()
    assert answer(connection, protocol, data, PEER) is None


async def test_a_live_peer_keeps_its_consent_answered_from_the_bytes(gateway, connect):
    with aiortc_compat.consent_timing(0.3, 6):
        client = await connect()
        session = next(iter(gateway.registry))
        await asyncio.wait_for(session.webrtc.connected.wait(), 5)
        answered, checks = ANSWERS.answered, aiortc_compat.CONSENT.answered
        responses = ANSWERS.responses
        await asyncio.sleep(1.5)  # ≈ 5 checks each way
        assert ANSWERS.answered - answered >= 2  # the client's checks, answered by the mux
        assert ANSWERS.responses - responses >= 2  # the answers to ours, from their bytes
        assert aiortc_compat.CONSENT.answered - checks >= 4  # both sides' checks answered
        result = await client.say("still here", voice="tone")
        assert (await client.wait_utterance(result.utterance["id"]))["state"] == "done"
        assert session.webrtc.pc.connectionState == "connected"


class Sent(Protocol):
    """A StunProtocol as a consent check uses it: its transactions, its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions: dict[bytes, object] = {}
        self.sends: list[tuple[float, bytes]] = []
        self.transport = self
        self._waits: list[tuple[int, asyncio.Event]] = []

    def sendto(self, data: bytes, addr: object) -> None:
        self.sends.append((asyncio.get_running_loop().time(), data))
        for count, event in self._waits:
            if len(self.sends) >= count:
                event.set()

    async def sent(self, count: int) -> None:
        """Return once ``count`` datagrams have been sent."""
        event = asyncio.Event()
        self._waits.append((count, event))
        if len(self.sends) >= count:
            event.set()
        await asyncio.wait_for(event.wait(), 5)


class Recording(consent_module._Clock):
    """The consent clock, with the times asked of it written down (what a loop stall on a
    loaded CI machine cannot move: CI once saw sends at 0, 0.05, 0.17, 0.37 s after a stall)."""

    __slots__ = ("asked",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.asked: list[tuple[float, object]] = []  # (the delay asked, the item)

    def at(self, when: float, item: Any) -> None:
        self.asked.append((when - self.time(), item))
        super().at(when, item)


def reply(txid: bytes, key: bytes, message_class: stun.Class = stun.Class.RESPONSE) -> bytes:
    message = stun.Message(message_method=stun.Method.BINDING, message_class=message_class,
                           transaction_id=txid)
    message.attributes["XOR-MAPPED-ADDRESS"] = PEER
    message.add_message_integrity(key)
    return bytes(message)


async def test_our_check_is_sent_on_rfc_5389s_schedule_by_the_clock(monkeypatch):
    """A consent check of ours: one request, sent again at 0.5, 1.5, 3.5 RTOs (scaled here),
    answerable until the window ends -- by the loop's consent clock: no task, no timer of its
    own; answered from its bytes (the shared socket's way) or parsed (aioice's)."""
    monkeypatch.setattr(aioice.stun, "RETRY_RTO", 0.05)
    monkeypatch.setattr(consent_module, "CLOCK_GRAIN_S", 0.001)
    connection, _ = connected()
    protocol = Sent()
    pair = aioice.ice.CandidatePair(protocol, connection._nominated[1].remote_candidate)
    loop = asyncio.get_running_loop()
    clock = Recording(loop)
    state = consent_module._Consent(connection, clock, loop.create_future())
    try:
        tasks = len(asyncio.all_tasks())
        check = consent_module._ConsentCheck(state, pair, window=0.6)
        check.start(loop.time())
        assert len(asyncio.all_tasks()) == tasks and len(protocol.transactions) == 1
        counts = aiortc_compat.CONSENT.as_json()
        await asyncio.sleep(0.7)
        delays = [delay for delay, item in clock.asked if item is check]
        assert delays[:3] == pytest.approx([0.05, 0.1, 0.2], abs=0.001)
        assert len(delays) == 4 and 0 <= delays[3] <= 0.6 - 0.35 + 1e-6
        assert len(protocol.sends) == 4
        assert all(b >= a for a, b in itertools.pairwise(t for t, _ in protocol.sends))
        assert len({data for _, data in protocol.sends}) == 1  # the same request, signed once
        assert not protocol.transactions and not state.checks
        assert aiortc_compat.CONSENT.unanswered == counts["unanswered"] + 1

        key = connection.remote_password.encode()
        for how in ("bytes", "parsed"):
            answered = consent_module._ConsentCheck(state, pair, window=0.6)
            answered.start(loop.time())
            await protocol.sent(len(protocol.sends) + 2)  # sent twice
            txid = next(iter(protocol.transactions))
            for wrong in (reply(txid, b"not their password"),
                          reply(txid, key, stun.Class.ERROR)):
                answered.response_bytes(wrong)  # neither counts: still out
                assert protocol.transactions
            if how == "bytes":
                protocol.transactions[txid].response_bytes(reply(txid, key))
            else:
                protocol.transactions[txid].response_received(
                    stun.parse_message(reply(txid, key)), PEER)
            before = len(protocol.sends)
            await asyncio.sleep(0.4)
            assert len(protocol.sends) == before  # no retransmission after the answer
            assert not protocol.transactions and state.fresh_since >= answered.sent
        assert aiortc_compat.CONSENT.answered == counts["answered"] + 2
    finally:
        state.close()


def test_our_check_is_aioices_request_byte_for_byte():
    for controlling in (False, True):
        connection, _ = connected(controlling)
        protocol = Sent()
        pair = aioice.ice.CandidatePair(protocol, connection._nominated[1].remote_candidate)
        loop = asyncio.new_event_loop()
        try:
            state = consent_module._Consent(connection, consent_module._Clock(loop),
                                            loop.create_future())
            for _ in range(3):
                check = consent_module._ConsentCheck(state, pair, window=30)
                theirs = connection.build_request(pair, nominate=False)
                theirs.transaction_id = check._txid
                theirs.add_message_integrity(connection.remote_password.encode())
                assert check.data == bytes(theirs)
            state.close()
        finally:
            loop.close()


async def test_the_clock_runs_what_falls_due_within_a_grain_at_once(monkeypatch):
    """Items due within one grain run from one timer, in one call, on time order."""
    monkeypatch.setattr(consent_module, "CLOCK_GRAIN_S", 0.05)
    loop = asyncio.get_running_loop()
    clock = consent_module._Clock(loop)
    fired: list[tuple[str, float]] = []

    class Item:
        def __init__(self, name: str, dead: bool = False) -> None:
            self.name, self.dead = name, dead

        def fire(self, now: float) -> None:
            fired.append((self.name, now))

    grain = math.ceil(loop.time() / 0.05) * 0.05  # (the items within one grain of it)
    for offset, name in ((0.011, "b"), (0.003, "a"), (0.024, "c")):
        clock.at(grain + offset, Item(name))
    clock.at(grain + 0.01, Item("dead", dead=True))
    clock.at(grain + 0.2, Item("later"))
    await asyncio.sleep(grain + 0.12 - loop.time())
    assert sorted(name for name, _ in fired) == ["a", "b", "c"]
    assert len({now for _, now in fired}) == 1  # one wake-up for the three
    assert fired[0][1] >= grain + 0.024  # (none early)
    await asyncio.sleep(0.15)
    assert [name for name, _ in fired][-1] == "later"


def test_the_clock_grain_is_set_within_bounds(monkeypatch):
    monkeypatch.setattr(consent_module, "CLOCK_GRAIN_S", consent_module.CLOCK_GRAIN_S)
    aiortc_compat.consent_clock_grain(0.001)
    assert consent_module.CLOCK_GRAIN_S == 0.001
    for wrong in (0, -1, 2):
        with pytest.raises(ValueError):
            aiortc_compat.consent_clock_grain(wrong)


def test_a_loop_gone_is_not_kept_by_its_consent_clock():
    import gc
    import weakref

    loop = asyncio.new_event_loop()
    consent_module._clock(loop).at(loop.time() + 60, consent_module._Clock(loop))  # type: ignore
    gone = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert gone() is None


async def test_the_clock_sweeps_its_dead_before_they_come_due():
    """A dead item due far ahead (a check's deadline is the whole consent window away) is not
    kept until then: once the dead are half the heap, it is swept of them."""
    loop = asyncio.get_running_loop()
    clock = consent_module._Clock(loop)

    class Item:
        dead = False

        def fire(self, now: float) -> None:
            pass

    live = [Item() for _ in range(10)]
    for item in live:
        clock.at(loop.time() + 3600, item)
    dying = [Item() for _ in range(4 * consent_module.SWEEP_AFTER)]
    for item in dying:
        clock.at(loop.time() + 3600, item)
    for item in dying:
        item.dead = True
        clock.forget()
    assert len(clock._heap) <= len(live) + consent_module.SWEEP_AFTER + 1
    assert {entry[2] for entry in clock._heap} >= set(live)  # the live ones all kept
