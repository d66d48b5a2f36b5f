import asyncio
import sys
import threading
from pathlib import Path

import pytest

from gateway.runtime.worker_pool import LATER, NOW, WorkerPool, default_workers


def blocker(pool: WorkerPool) -> tuple[threading.Event, threading.Event]:
    """Occupy one worker until the returned ``release`` is set; ``started`` says it runs."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    pool.submit(hold)
    assert started.wait(10)
    return started, release


def test_jobs_queue_for_a_bounded_number_of_threads():
    pool = WorkerPool(2)
    gate, changed = threading.Event(), threading.Condition()
    running = [0]

    def job() -> bool:
        with changed:
            running[0] += 1
            changed.notify_all()
        return gate.wait(10)

    futures = [pool.submit(job) for _ in range(12)]
    with changed:
        assert changed.wait_for(lambda: running[0] == 2, 10)
    assert pool.threads == 2 and pool.queued == 10 and pool.busy == 2
    gate.set()
    assert all(f.result(10) for f in futures)
    assert pool.peak_busy == 2 and pool.completed == 12
    pool.shutdown()


def test_now_jobs_run_before_later_ones_fifo_within_each():
    pool = WorkerPool(1)
    _, release = blocker(pool)
    order: list[str] = []
    jobs = [("later-1", LATER), ("now-1", NOW), ("later-2", LATER), ("now-2", NOW)]
    futures = [pool.submit(order.append, name, priority=p) for name, p in jobs]
    release.set()
    for f in futures:
        f.result(10)
    assert order == ["now-1", "now-2", "later-1", "later-2"]
    pool.shutdown()


def test_promote_moves_a_waiting_prefetch_ahead():
    pool = WorkerPool(1)
    _, release = blocker(pool)
    order: list[str] = []
    others = [pool.submit(order.append, f"other-{i}", priority=LATER) for i in range(3)]
    prefetch = pool.submit(order.append, "mine", priority=LATER)
    promoted = pool.promote(prefetch, order.append, "mine")
    assert promoted is not prefetch and prefetch.cancelled()
    release.set()
    promoted.result(10)
    for f in others:
        f.result(10)
    assert order == ["mine", "other-0", "other-1", "other-2"]
    done = pool.submit(order.append, "x")
    done.result(10)
    assert pool.promote(done, order.append, "x") is done  # already ran: nothing to redo
    pool.shutdown()


async def test_cancelling_the_awaiting_task_drops_a_job_not_started():
    pool = WorkerPool(1)
    _, release = blocker(pool)
    ran: list[int] = []
    job = pool.submit(ran.append, 1)
    awaited = asyncio.wrap_future(job)  # what ``run`` awaits
    chained = asyncio.get_running_loop().create_future()
    # Done-callbacks run in order: once this one has run, wrap_future's has cancelled ``job``.
    awaited.add_done_callback(lambda _: chained.set_result(None))
    awaited.cancel()  # the awaiting task was cancelled
    await chained
    assert job.cancelled()
    release.set()
    pool.submit(ran.append, 2).result(10)
    assert ran == [2]
    pool.shutdown()


async def test_errors_reach_the_caller():
    pool = WorkerPool(1)
    with pytest.raises(ZeroDivisionError):
        await pool.run(lambda: 1 / 0)
    assert await pool.run(sum, [1, 2]) == 3
    pool.shutdown()


def test_shutdown_cancels_what_has_not_started():
    pool = WorkerPool(1)
    _, release = blocker(pool)
    waiting = pool.submit(print, "never")
    pool.shutdown()
    assert waiting.cancelled()
    release.set()
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(print, "late")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux")
def test_workers_run_at_a_lower_cpu_priority():
    pool = WorkerPool(1, nice=7)
    tid = pool.submit(threading.get_native_id).result(10)
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    nice = int(stat.rsplit(")", 1)[1].split()[16])  # field 19 of proc(5)
    main = Path(f"/proc/self/task/{threading.get_native_id()}/stat").read_text()
    loop = int(main.rsplit(")", 1)[1].split()[16])
    # 7 more than the event loop's thread (`nice -n 15 pytest`: 19, the most there is)
    assert nice == min(19, loop + 7), (nice, loop)
    pool.shutdown()


def test_default_size_leaves_a_core_to_the_event_loop():
    assert 2 <= default_workers() <= 8
