"""Where a new session goes: the least-loaded worker with room (LiveKit's node selector, per
worker).

1. available: state ``serving`` and fewer sessions than its cap (counting the placements this
   node has made that its stats cannot show yet); a full or draining worker is never chosen;
2. cool: load below ``HOT`` (0.9) -- unless every available worker is hotter, then all of them
   (as LiveKit's sysload filter);
3. this node's own workers (stats polled every 0.5 s): the least loaded; the other nodes'
   (Redis, up to ~2 s old, and other fronts place on them too): the better of two picked at
   random ("the power of two choices", which keeps fronts working from stale stats from all
   piling onto the same least-loaded worker); with two or fewer, simply the less loaded;
4. a remote worker wins only when less loaded than the best local one by more than
   ``REMOTE_MARGIN`` (a local placement is proxied in one round trip, a remote one costs the
   client a 307: not worth it for a difference within the CPU reading's noise); a full local
   node sends every new session to the other nodes.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.cluster.directory import WorkerStatus

HOT = 0.9
REMOTE_MARGIN = 0.05  # of load: 5 % of a core, or 5 sessions of a 100-session cap
RESERVATION_S = 10.0  # a placement not seen in the stats after this long is forgotten


@dataclass(frozen=True, slots=True)
class Candidate:
    status: WorkerStatus
    local: bool
    sessions: int  # the status's count plus placements it cannot show yet

    @property
    def id(self) -> str:
        return self.status.id

    @property
    def full(self) -> bool:
        return self.sessions >= self.status.max_sessions

    @property
    def load(self) -> float:
        cap = self.status.max_sessions
        return max(self.sessions / cap if cap > 0 else 1.0, self.status.cpu)


def available(candidates: Iterable[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.status.state == "serving" and not c.full]


def choose(candidates: Sequence[Candidate], rng: random.Random | None = None) -> Candidate | None:
    """The worker for a new session, or None when every one is full, draining or down."""
    rng = rng or random.Random()
    usable = available(candidates)
    if not usable:
        return None
    cool = [c for c in usable if c.load < HOT] or usable
    local = [c for c in cool if c.local]
    remote = [c for c in cool if not c.local]
    best_local = _least_loaded(local, rng) if local else None
    if len(remote) > 2:
        a, b = rng.sample(remote, 2)
        best_remote: Candidate | None = a if a.load <= b.load else b
    else:
        best_remote = _least_loaded(remote, rng) if remote else None
    if best_local is None:
        return best_remote
    if best_remote is not None and best_remote.load + REMOTE_MARGIN < best_local.load:
        return best_remote
    return best_local


def _least_loaded(candidates: Sequence[Candidate], rng: random.Random) -> Candidate:
    low = min(c.load for c in candidates)
    tied = [c for c in candidates if c.load <= low + 1e-9]
    fewest = min(c.sessions for c in tied)
    return rng.choice([c for c in tied if c.sessions == fewest])


class Reservations:
    """Placements this node made that a worker's stats may not count yet: each one counts until
    stats taken after it (``WorkerStatus.ts``, wall clock) arrive, or ``RESERVATION_S``."""

    def __init__(self) -> None:
        self._placed: defaultdict[str, list[float]] = defaultdict(list)
        self._inflight: defaultdict[str, int] = defaultdict(int)

    def begin(self, worker: str) -> None:
        """A proxied creation is under way on ``worker``."""
        self._inflight[worker] += 1

    def end(self, worker: str, created: bool) -> None:
        self._inflight[worker] = max(0, self._inflight[worker] - 1)
        if created:
            self.placed(worker)

    def placed(self, worker: str, at: float | None = None) -> None:
        self._placed[worker].append(time.time() if at is None else at)

    def pending(self, status: WorkerStatus, now: float | None = None) -> int:
        now = time.time() if now is None else now
        times = [t for t in self._placed.get(status.id, ()) if now - t < RESERVATION_S]
        if times:
            self._placed[status.id] = times
        else:
            self._placed.pop(status.id, None)
        return self._inflight.get(status.id, 0) + sum(1 for t in times if t > status.ts)

    def candidate(self, status: WorkerStatus, local: bool) -> Candidate:
        return Candidate(status, local, status.sessions + self.pending(status))
