"""ICE consent freshness (RFC 7675) where a late answer still counts, and the tests' short
consent timing."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import os
import random
import weakref
from collections.abc import Awaitable, Iterator
from typing import Any, Protocol

import aioice.candidate
import aioice.ice
import aioice.stun
from aiortc import (
    RTCPeerConnection,
)

from gateway.aiortc_compat._common import _ice_connections
from gateway.net import stun_fields

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
    ``CONSENT_INTERVAL`` (±20 %), from one clock a loop (``_Clock``) rather than a wake-up of
    the connection's task each, and a check's request is aioice's, serialised once a pair.

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


#: The consent clock's grain (s): every time it keeps is rounded up to it, so the checks of
#: 1,000 sessions (200 a second) go out in ten batches a second from one timer, each on a warm
#: core, instead of one loop wake-up each (aioice: a task per session, a wake-up per check).
CLOCK_GRAIN_S = 0.1
SWEEP_AFTER = 64  # dead items the clock's heap may hold before a sweep (``_Clock.forget``)


def consent_clock_grain(seconds: float) -> None:
    """Round the process's consent times to ``seconds`` (``CLOCK_GRAIN_S``) from now on: the
    load generator's listeners use 1 ms, so their checks reach the gateway each at its own
    time, as independent browsers send theirs, not in the ten batches a second of one clock."""
    global CLOCK_GRAIN_S
    if not 0 < seconds <= 1:
        raise ValueError("a consent clock grain is more than 0 and at most 1 s")
    CLOCK_GRAIN_S = seconds


class _Clock:
    """A loop's consent work -- every connection's next check, every check's retransmission
    and deadline -- kept in one heap and run from one timer handle at the earliest due time,
    rounded up to ``CLOCK_GRAIN_S``. An item is anything with ``fire(now)`` and a ``dead``
    flag; a dead one is dropped when it comes due (it holds nothing of its session by then)."""

    __slots__ = ("_dead", "_heap", "_loop", "_order", "_timer_at")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # The loop held weakly and no timer handle kept (a handle holds its loop): ``_CLOCKS``
        # is keyed by the loop, and a value reaching its key would keep every loop alive. A
        # timer overtaken by an earlier one finds itself stale when it fires (``_run``).
        self._loop = weakref.ref(loop)
        self._heap: list[tuple[float, int, _Item]] = []
        self._order = itertools.count()
        self._timer_at = math.inf  # when the live timer fires
        self._dead = 0  # items that died since the heap was last swept (about: ``forget``)

    def time(self) -> float:
        loop = self._loop()
        return math.inf if loop is None else loop.time()

    def at(self, when: float, item: _Item) -> None:
        when = math.ceil(when / CLOCK_GRAIN_S - 1e-9) * CLOCK_GRAIN_S
        heapq.heappush(self._heap, (when, next(self._order), item))
        if when < self._timer_at:
            self._arm(when)

    def forget(self) -> None:
        """An item died. Once the dead are at least half the heap (and more than
        ``SWEEP_AFTER``), the heap is swept of them, as asyncio sweeps cancelled timer
        handles: a dead item is otherwise kept until it comes due, and a check's deadline is
        the whole consent window away. (Counted from above: an item may die just after it
        was popped.)"""
        self._dead += 1
        if self._dead > SWEEP_AFTER and 2 * self._dead >= len(self._heap):
            self._heap = [entry for entry in self._heap if not entry[2].dead]
            heapq.heapify(self._heap)
            self._dead = 0

    def _arm(self, when: float) -> None:
        loop = self._loop()
        if loop is not None:
            self._timer_at = when
            loop.call_at(when, self._run, when)

    def _run(self, armed: float) -> None:
        if armed != self._timer_at:
            return  # overtaken: the live timer is an earlier one's
        self._timer_at = math.inf
        heap = self._heap
        now = self.time()
        while heap and heap[0][0] <= now + 1e-6:
            item = heapq.heappop(heap)[2]
            if item.dead:
                self._dead = max(0, self._dead - 1)
                continue
            try:
                item.fire(now)
            except Exception:  # one session's failure must not stop the others' consent
                log.exception("ICE consent: a check failed")
        if heap:
            self._arm(heap[0][0])


class _Item(Protocol):
    dead: bool

    def fire(self, now: float) -> None: ...


_CLOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Clock] = (
    weakref.WeakKeyDictionary())


def _clock(loop: asyncio.AbstractEventLoop) -> _Clock:
    clock = _CLOCKS.get(loop)
    if clock is None:
        clock = _CLOCKS[loop] = _Clock(loop)
    return clock


class _ConsentCheck:
    """One consent check (RFC 7675): its STUN request signed once, sent at 0, 0.5, 1.5 and
    3.5 s (RFC 5389's timing, ``CONSENT_RETRANSMISSIONS``) by the consent clock, and answerable
    until the consent window ends. It stands in for aioice's ``stun.Transaction`` in
    ``StunProtocol.transactions``: aioice hands it a parsed response
    (``response_received``), the shared socket the response's bytes (``response_bytes``,
    consent_answer.py). No task, no timer handle of its own."""

    __slots__ = ("_consent", "_left", "_txid", "data", "dead", "key", "pair", "sent", "wait",
                 "window")

    def __init__(self, consent: _Consent, pair: Any, window: float) -> None:
        self._consent = consent
        self.pair = pair
        self.window = window
        self.key = consent.connection.remote_password.encode("utf8")
        self._txid = os.urandom(12)
        self.data = stun_fields.sign(
            stun_fields.with_transaction(consent.request(pair), self._txid), self.key)
        self._left = CONSENT_RETRANSMISSIONS
        self.dead = False
        self.sent = self.wait = 0.0

    def start(self, now: float) -> None:
        self.pair.protocol.transactions[self._txid] = self
        self._consent.checks.add(self)
        self.sent = now
        self.wait = aioice.stun.RETRY_RTO
        CONSENT.checks += 1
        self.fire(now)

    def fire(self, now: float) -> None:
        """Send (again), or, past the last send, give up: unanswered within the window."""
        clock = self._consent.clock
        if self._left < 0:
            self.cancel()
            CONSENT.unanswered += 1
            return
        self.pair.protocol.transport.sendto(self.data, self.pair.remote_addr)
        if self._left:
            clock.at(now + self.wait, self)
            self.wait *= 2
        else:  # the last one: its answer counts until the window ends
            clock.at(max(now, self.sent + self.window), self)
        self._left -= 1

    def response_received(self, message: Any, addr: tuple[str, int]) -> None:
        if (message.message_class == aioice.stun.Class.RESPONSE
                and message.check_message_integrity(self.key)):
            self._answered()

    def response_bytes(self, data: bytes) -> None:
        """A response with this check's transaction id, as it came (``is_stun`` accepted it)."""
        if (stun_fields.stun_class(data) == stun_fields.SUCCESS
                and stun_fields.signed_by(data, self.key)):
            self._answered()

    def _answered(self) -> None:
        if self.dead:  # (answered or given up already)
            return
        consent = self._consent
        self.cancel()
        CONSENT.answered += 1
        now = consent.clock.time()
        if now - self.sent > aioice.stun.RETRY_RTO:
            CONSENT.answered_late += 1
        consent.fresh_since = max(consent.fresh_since, self.sent)

    def cancel(self) -> None:
        """Forget the check: its transaction, its pair; the clock drops it when it comes due."""
        if self.dead:
            return
        self.dead = True
        self.pair.protocol.transactions.pop(self._txid, None)
        self._consent.checks.discard(self)
        self._consent.clock.forget()
        self.pair = None  # (the clock's entry must not keep a closed session's objects)


class _Consent:
    """A connection's consent state: its next check on the clock, when the latest answered
    check was sent, the checks out, and the future its consent task waits on (set when
    consent expires)."""

    __slots__ = ("_requests", "checks", "clock", "connection", "dead", "expired",
                 "fresh_since")

    def __init__(self, connection: Any, clock: _Clock, expired: asyncio.Future[None]) -> None:
        self.connection = connection
        self.clock = clock
        self.expired = expired
        self.dead = False
        now = clock.time()
        self.fresh_since = now  # (connect: a check was answered)
        self.checks: set[_ConsentCheck] = set()
        self._requests: dict[Any, bytes] = {}  # a pair's request, unsigned (its id replaced)
        clock.at(now + _interval(), self)

    def request(self, pair: Any) -> bytes:
        """``pair``'s consent request as aioice builds it (USERNAME, PRIORITY, the role and
        tie-breaker), serialised once for the connection's life on that pair."""
        data = self._requests.get(pair)
        if data is None:
            if len(self._requests) >= 4:  # (an ICE restart's new pair: the old ones go)
                self._requests.clear()
            data = self._requests[pair] = bytes(
                self.connection.build_request(pair, nominate=False))
        return data

    def fire(self, now: float) -> None:
        """A check is due: send one on each nominated pair, unless consent has expired."""
        window = aioice.ice.CONSENT_INTERVAL * aioice.ice.CONSENT_FAILURES
        if now - self.fresh_since >= window:
            if not self.expired.done():
                self.expired.set_result(None)
            self.close()
            return
        self.clock.at(now + _interval(), self)  # (first: a check that fails loses no more)
        for pair in list(self.connection._nominated.values()):
            _ConsentCheck(self, pair, window).start(now)

    def close(self) -> None:
        """Stop: the checks out are forgotten, the connection let go."""
        if not self.dead:
            self.clock.forget()
        self.dead = True
        for check in list(self.checks):
            check.cancel()
        self._requests.clear()
        self.connection = None


def _interval() -> float:
    """The wait to the next check: ``CONSENT_INTERVAL`` varied by ±20 % (RFC 7675 §5.1)."""
    return aioice.ice.CONSENT_INTERVAL * (0.8 + 0.4 * random.random())


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
    expired: asyncio.Future[None] = loop.create_future()
    consent = _Consent(connection, _clock(loop), expired)
    try:
        await expired  # the clock does the checks; this task only waits for the end
    finally:
        consent.close()
    CONSENT.expired += 1
    log.info("ICE consent expired: no answer to a check sent in the last %.0f s",
             loop.time() - consent.fresh_since)
    connection._query_consent_task = None  # close() would otherwise cancel this very task
    await connection.close()
