"""Monotonic readings as wall-clock (Unix epoch) milliseconds, for timelines a browser on the
same machine can line up with its own clock (``performance.timeOrigin + performance.now()``).

The gateway times everything on ``time.monotonic`` (immune to clock steps); exported timelines
add the current offset between the two clocks, read at export time (``wall_offset``), so a
reading taken earlier is dated as the wall clock stood then unless the clock was stepped or
slewed in between (NTP slews by at most 0.5 ms per second).
"""

from __future__ import annotations

import time


def wall_offset() -> float:
    """Seconds to add to a ``time.monotonic()`` reading to get ``time.time()``."""
    return time.time() - time.monotonic()


def wall_ms(monotonic: float | None, offset: float | None = None) -> float | None:
    """``monotonic`` as Unix epoch milliseconds (None stays None)."""
    if monotonic is None:
        return None
    return round((monotonic + (wall_offset() if offset is None else offset)) * 1000, 3)
