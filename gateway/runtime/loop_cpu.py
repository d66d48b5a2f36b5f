"""The event loop's own core: pin the loop's thread to one CPU and hand the others to helper
processes (Whisper's), so that no decode ever runs where the loop runs.

Why (bench/duplex_load.py, 100 listeners + 4 talkers on this 2-vCPU VM, calm): with the
decoding process free to run anywhere at SCHED_IDLE, the talking windows kept 90.6 % of the
listeners' packets within 5 ms against 99.1 % quiet, with 10 loop stalls >= 10 ms, every one
caught in a call that releases the GIL (sendmmsg, SRTP, Opus, urandom): the loop was waiting to
get the GIL back from a thread of ours that another process had preempted on the other core.
With the gateway's threads on core 0 and Whisper on core 1: 98.1 % against 99.0 %, no stall.
Threads the loop's thread starts after ``reserve`` inherit its CPU; ``release`` undoes it.
"""

from __future__ import annotations

import contextlib
import os

from gateway.runtime.worker_pool import processes

_active: list[LoopCpu] = []  # reservations in force (the loop's thread pinned)


def helper_cpus() -> tuple[int, ...]:
    """The CPUs a reservation in force leaves to helper processes (the turn model's, started
    after Whisper's load pinned the loop); () when the loop is not pinned."""
    return _active[-1].others if _active else ()


class LoopCpu:
    def __init__(self) -> None:
        self._saved: set[int] | None = None
        self.cpu: int | None = None

    def reserve(self) -> tuple[int, ...]:
        """Pin the calling thread (the event loop's) to the first CPU it may use; returns the
        others. () when there is nothing to split: one CPU, no affinity calls, or several
        gateway processes sharing the machine (the supervisor's workers: not pinned)."""
        if self._saved is not None:
            return self.others
        if processes() > 1 or not hasattr(os, "sched_setaffinity"):
            return ()
        allowed = os.sched_getaffinity(0)
        if len(allowed) < 2:
            return ()
        cpu = min(allowed)
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            return ()
        self._saved, self.cpu = allowed, cpu
        _active.append(self)
        return self.others

    @property
    def others(self) -> tuple[int, ...]:
        return tuple(sorted((self._saved or set()) - {self.cpu}))

    def release(self) -> None:
        """The calling thread back on every CPU it had (call it from the loop's thread)."""
        if self._saved is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, self._saved)
            self._saved, self.cpu = None, None
            if self in _active:
                _active.remove(self)
