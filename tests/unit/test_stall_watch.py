import asyncio
import time

import pytest

from gateway.runtime.stall_watch import StallWatch


def block_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the stimulus: a synchronous call holding the event loop


async def test_a_blocked_loop_is_reported_with_where_it_was():
    watch = StallWatch(threshold=0.05)
    watch.start()
    try:
        await asyncio.sleep(0)
        assert watch.stats.stalls == 0
        block_the_loop(0.3)
        assert watch.stats.stalls == 1  # reported once, while it was blocked
        assert "block_the_loop" in watch.stats.last_stack
    finally:
        watch.stop()


async def test_a_loop_that_keeps_turning_is_not_reported():
    watch = StallWatch(threshold=0.05)
    watch.start()
    try:
        for _ in range(20):
            block_the_loop(0.01)  # short synchronous work, loop turns in between
            await asyncio.sleep(0)
        assert watch.stats.stalls == 0
    finally:
        watch.stop()


def test_threshold_must_be_positive():
    with pytest.raises(ValueError):
        StallWatch(0)
