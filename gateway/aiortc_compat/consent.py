"""ICE consent freshness (RFC 7675) where a late answer still counts, and the tests' short
consent timing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import weakref
from collections.abc import Awaitable, Iterator
from typing import Any

import aioice.candidate
import aioice.ice
import aioice.stun
from aiortc import (
    RTCPeerConnection,
)

from gateway.aiortc_compat._common import _ice_connections

log = logging.getLogger(__name__)


@contextlib.contextmanager
def consent_timing(interval_s: float, failures: int) -> Iterator[None]:
    """TEST ONLY: ICE consent freshness (RFC 7675) checked every ``interval_s`` (±20 %), a peer
    failed after ``failures`` checks in a row go unanswered (aioice: 5 s and 6, ≈30 s).

    aioice reads ``CONSENT_INTERVAL`` / ``CONSENT_FAILURES`` (module globals) on every check,
    so running connections follow too. Process-wide while active.
    """
    if interval_s <= 0 or failures < 1:
        raise ValueError("interval must be positive and failures at least 1")
    saved = aioice.ice.CONSENT_INTERVAL, aioice.ice.CONSENT_FAILURES
    aioice.ice.CONSENT_INTERVAL = interval_s  # type: ignore[assignment]
    aioice.ice.CONSENT_FAILURES = failures
    try:
        yield
    finally:
        aioice.ice.CONSENT_INTERVAL, aioice.ice.CONSENT_FAILURES = saved


# --- ICE consent freshness (RFC 7675): a late answer still counts ---------------------------

#: Retransmissions of one consent check (RFC 5389 timing: sent at 0, 0.5, 1.5 and 3.5 s), where
#: aioice sends one. Its answer counts for as long as the consent window lasts (30 s).
CONSENT_RETRANSMISSIONS = 3


class ConsentStats:
    """Process-wide counts of the consent checks ``tolerate_late_consent`` sent (plain ints:
    read by /healthz and /metrics)."""

    __slots__ = ("answered", "answered_late", "checks", "expired", "unanswered")

    def __init__(self) -> None:
        self.checks = 0  # consent checks sent (each with its retransmissions)
        self.answered = 0
        self.answered_late = 0  # answered after 0.5 s: a failure to stock aioice
        self.unanswered = 0  # no answer within the consent window
        self.expired = 0  # connections closed: no check sent within the window was answered

    def as_json(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


CONSENT = ConsentStats()


def tolerate_late_consent(pc: RTCPeerConnection) -> int:
    """RFC 7675 consent freshness for ``pc``'s ICE agents, in place of aioice's, which sends
    each check once and counts it failed unless answered within 0.5 s (``RETRY_RTO``): six such
    in a row (≈30 s) and it closes the connection, even if every check was answered -- a peer
    or a network more than 0.5 s behind (a saturated load generator, a busy browser tab, a
    bufferbloated uplink) loses its session although it consents all along. Here a check is
    retransmitted (``CONSENT_RETRANSMISSIONS``), its answer is accepted until the consent window
    ends, and consent expires when no check sent within the last ``CONSENT_INTERVAL *
    CONSENT_FAILURES`` (30 s) was answered, as RFC 7675 section 5.1 has it. Checks still go every
    ``CONSENT_INTERVAL`` (±20 %).

    Call before the connection starts (``connect`` creates the consent task from
    ``Connection.query_consent``, replaced here per instance). Returns the agents changed."""
    changed = 0
    attrs = ("query_consent", "_query_consent_task", "_nominated", "build_request")
    for connection in _ice_connections(pc, attrs):
        if "query_consent" in vars(connection):
            continue
        connection.query_consent = _ConsentQuery(connection)
        changed += 1
    return changed


def _consent_problems() -> list[str]:
    """check_internals' part for this section."""
    problems: list[str] = []
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("query_consent", "build_request", "close"):
        if not callable(getattr(probe, name, None)):
            problems.append(f"aioice.Connection.{name}")
    for name in ("_query_consent_task", "remote_password"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    if "query_consent" not in aioice.ice.Connection.connect.__code__.co_names:
        problems.append("aioice.Connection.connect no longer starts query_consent")
    stun_protocol = getattr(aioice.ice, "StunProtocol", None)
    made = getattr(getattr(stun_protocol, "connection_made", None), "__code__", None)
    if made is None or "transport" not in made.co_names:  # a check is sent on its transport
        problems.append("aioice.StunProtocol.connection_made -> transport")
    code = getattr(getattr(stun_protocol, "datagram_received", None), "__code__", None)
    if code is None or "response_received" not in code.co_names:  # how it answers transactions
        problems.append("aioice.StunProtocol.datagram_received -> transactions[id]")
    if not isinstance(getattr(aioice.stun, "RETRY_RTO", None), int | float):
        problems.append("aioice.stun.RETRY_RTO")
    return problems


class _ConsentCheck:
    """One consent check (RFC 7675): its STUN request built and serialised once, sent at 0,
    0.5, 1.5 and 3.5 s (RFC 5389's timing, ``CONSENT_RETRANSMISSIONS``) from loop timers, and
    answerable until the consent window ends. It stands in for aioice's ``stun.Transaction`` in
    ``StunProtocol.transactions``, which hands it every response with its transaction id. No
    task, no ``asyncio.wait``: a check is a few timer handles (1,000 sessions make 200 a
    second)."""

    __slots__ = ("_consent", "_timer", "_txid", "data", "key", "pair", "sent", "wait",
                 "window")

    def __init__(self, consent: _Consent, pair: Any, window: float) -> None:
        self._consent = consent
        self.pair = pair
        self.window = window
        connection = consent.connection
        request = connection.build_request(pair, nominate=False)
        self.key = connection.remote_password.encode("utf8")
        request.add_message_integrity(self.key)  # (and its FINGERPRINT)
        self.data = bytes(request)
        self._txid = request.transaction_id
        self._timer: asyncio.TimerHandle | None = None
        self.sent = self.wait = 0.0

    def start(self) -> None:
        self.pair.protocol.transactions[self._txid] = self
        self._consent.checks.add(self)
        self.sent = self._consent.loop.time()
        self.wait = aioice.stun.RETRY_RTO
        CONSENT.checks += 1
        self._send(CONSENT_RETRANSMISSIONS)

    def _send(self, left: int) -> None:
        self.pair.protocol.transport.sendto(self.data, self.pair.remote_addr)
        loop = self._consent.loop
        if left:
            self._timer = loop.call_later(self.wait, self._send, left - 1)
            self.wait *= 2
        else:  # the last one: its answer counts until the window ends
            rest = max(0.0, self.sent + self.window - loop.time())
            self._timer = loop.call_later(rest, self._unanswered)

    def response_received(self, message: Any, addr: tuple[str, int]) -> None:
        if (self._timer is not None  # (not answered or given up already)
                and message.message_class == aioice.stun.Class.RESPONSE
                and message.check_message_integrity(self.key)):
            self.cancel()
            CONSENT.answered += 1
            if self._consent.loop.time() - self.sent > aioice.stun.RETRY_RTO:
                CONSENT.answered_late += 1
            self._consent.fresh_since = max(self._consent.fresh_since, self.sent)

    def _unanswered(self) -> None:
        self.cancel()
        CONSENT.unanswered += 1

    def cancel(self) -> None:
        """Forget the check: its timer, its transaction."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.pair.protocol.transactions.pop(self._txid, None)
        self._consent.checks.discard(self)


class _Consent:
    """A connection's consent state: when the latest answered check was sent, the checks out."""

    __slots__ = ("checks", "connection", "fresh_since", "loop")

    def __init__(self, connection: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.connection = connection
        self.loop = loop
        self.fresh_since = loop.time()  # (connect: a check was answered)
        self.checks: set[_ConsentCheck] = set()


class _ConsentQuery:
    """``connection.query_consent`` for one connection, holding it weakly: a bound method or a
    partial stored on the instance is a reference cycle, and a closed session must be freed
    by reference counting, not left for the cyclic collector (tests/test_gc_churn.py)."""

    __slots__ = ("_connection",)

    def __init__(self, connection: Any) -> None:
        self._connection = weakref.ref(connection)

    def __call__(self) -> Awaitable[None]:
        connection = self._connection()
        return asyncio.sleep(0) if connection is None else _query_consent(connection)


async def _query_consent(connection: Any) -> None:
    loop = asyncio.get_running_loop()
    consent = _Consent(connection, loop)
    try:
        while True:
            interval = aioice.ice.CONSENT_INTERVAL
            await asyncio.sleep(interval * (0.8 + 0.4 * random.random()))
            window = interval * aioice.ice.CONSENT_FAILURES
            if loop.time() - consent.fresh_since >= window:
                break
            for pair in list(connection._nominated.values()):
                _ConsentCheck(consent, pair, window).start()
    finally:
        for check in list(consent.checks):
            check.cancel()
    CONSENT.expired += 1
    log.info("ICE consent expired: no answer to a check sent in the last %.0f s",
             loop.time() - consent.fresh_since)
    connection._query_consent_task = None  # close() would otherwise cancel this very task
    await connection.close()
