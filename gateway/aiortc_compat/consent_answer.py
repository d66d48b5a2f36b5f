"""The peer's consent checks answered from their bytes (issue 28: the loop's work per session).

A connected peer sends a STUN binding request on the nominated pair every 5 s or so (RFC 7675
consent freshness; a browser's are its ICE keep-alives too). aioice answers each by parsing the
whole message into objects, checking its integrity, building a response and serialising it
twice more (integrity, fingerprint) -- 41 µs hot a request, 1,000 sessions' worth a few per
cent of the loop. ``answer_consent_directly`` lets the shared socket answer the plain case from
the bytes (``net/stun_fields.py``), before aioice sees the request:

- a binding request from the remote address of the pair nominated for that socket's component,
  the pair succeeded, the connection not closing and past ``connect`` (its early checks run);
- for the connection's current credentials: USERNAME ``<our ufrag>:<theirs>`` (aioice's
  ``_valid_username``), MESSAGE-INTEGRITY by our password, its FINGERPRINT right if present;
- the peer's role the opposite of ours (no role conflict) and no USE-CANDIDATE.

It hands the responses to our own consent checks (consent.py's ``_ConsentCheck``) their bytes
too, which aioice would parse into objects first.

That request changes nothing in aioice (``check_incoming`` finds the succeeded pair: no
triggered check, no nomination), so the answer is all there is to do; it is aioice's own
response byte for byte (XOR-MAPPED-ADDRESS, MESSAGE-INTEGRITY, FINGERPRINT). Anything else -- a
nomination, a role conflict, a bad integrity or fingerprint, another address, an ICE restart's
checks before its pair is nominated -- goes to aioice as before.
"""

from __future__ import annotations

import weakref
from typing import Any

import aioice.ice
from aiortc import RTCPeerConnection

from gateway.aiortc_compat._common import _ice_connections
from gateway.aiortc_compat.consent import _ConsentCheck
from gateway.net import stun_fields as stun

USE_CANDIDATE = 0x0025
ICE_CONTROLLED = 0x8029
ICE_CONTROLLING = 0x802A
_SUCCEEDED = aioice.ice.CandidatePair.State.SUCCEEDED


class ConsentAnswers:
    """Process-wide counts (a plain int; read by the tests, not yet in /healthz)."""

    __slots__ = ("answered", "responses")

    def __init__(self) -> None:
        self.answered = 0  # binding requests answered from their bytes
        self.responses = 0  # responses to our consent checks taken from their bytes


ANSWERS = ConsentAnswers()


class _Answer:
    """One ICE protocol's (a socket's, per component) answerer: holds its connection and
    protocol weakly (the shared socket's endpoint keeps it; a session is freed by reference
    counting)."""

    __slots__ = ("_connection", "_protocol")

    def __init__(self, connection: Any, protocol: Any) -> None:
        self._connection = weakref.ref(connection)
        self._protocol = weakref.ref(protocol)

    def __call__(self, data: bytes, source: tuple[str, int]) -> bool:
        connection, protocol = self._connection(), self._protocol()
        if connection is None or protocol is None:
            return False
        if stun.stun_class(data) != stun.REQUEST:  # a response: one of our consent checks'?
            check = protocol.transactions.get(stun.transaction_id(data))
            if type(check) is not _ConsentCheck:
                return False
            check.response_bytes(data)
            ANSWERS.responses += 1
            return True
        response = answer(connection, protocol, data, source)
        if response is None:
            return False
        protocol.transport.sendto(response, source)
        ANSWERS.answered += 1
        return True


def answer(connection: Any, protocol: Any, data: bytes, source: tuple[str, int]
           ) -> bytes | None:
    """aioice's response to ``data`` (a STUN message from ``source`` on ``protocol``) when it
    is the plain consent check the module describes; None: aioice is to handle it."""
    if (connection._closing or not connection._early_checks_done
            or int.from_bytes(data[0:2], "big") != stun.BINDING_REQUEST):
        return None
    scanned = stun.attributes(data)
    if scanned is None:
        return None
    found, integrity_at, _ = scanned
    if integrity_at < 0 or USE_CANDIDATE in found:
        return None
    ours, theirs = ((ICE_CONTROLLING, ICE_CONTROLLED) if connection.ice_controlling
                    else (ICE_CONTROLLED, ICE_CONTROLLING))
    if theirs not in found or ours in found:
        return None
    pair = connection._nominated.get(protocol.local_candidate.component)
    if (pair is None or pair.protocol is not protocol or pair.state is not _SUCCEEDED
            or pair.remote_addr != source):
        return None
    try:
        username = found.get(stun.USERNAME, b"").decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not connection._valid_username(username):
        return None
    key = connection.local_password.encode("utf8")
    if not stun.scanned_signed_by(data, scanned, key):
        return None
    return stun.binding_success(stun.transaction_id(data), source, key)


def answer_consent_directly(pc: RTCPeerConnection) -> int:
    """Let the shared socket answer ``pc``'s plain consent checks (call once connected; its
    endpoints are the ones ``share_udp_socket`` made). Returns the endpoints that do."""
    count = 0
    for connection in _ice_connections(pc, ("_nominated", "_protocols", "_closing")):
        for protocol in connection._protocols:
            endpoint = getattr(protocol, "transport", None)
            if endpoint is not None and hasattr(endpoint, "answer_stun"):
                endpoint.answer_stun = _Answer(connection, protocol)
                count += 1
    return count


def _consent_answer_problems() -> list[str]:
    """check_internals' part: what ``answer`` reads of aioice."""
    problems: list[str] = []
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("_closing", "_early_checks_done", "_nominated", "_protocols",
                 "ice_controlling", "local_password"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    if not callable(getattr(probe, "_valid_username", None)):
        problems.append("aioice.Connection._valid_username")
    code = aioice.ice.Connection.request_received.__code__
    for name in ("_valid_username", "check_message_integrity", "check_incoming",
                 "switch_role"):
        if name not in code.co_names:
            problems.append(f"aioice.Connection.request_received no longer calls {name}")
    for name in ("protocol", "remote_addr", "state"):
        if not hasattr(aioice.ice.CandidatePair, name) and name not in (
                aioice.ice.CandidatePair.__init__.__code__.co_names):
            problems.append(f"aioice.CandidatePair.{name}")
    return problems
