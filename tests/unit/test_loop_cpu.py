"""The event loop's own core: the calling thread pinned to one CPU, the others handed out,
undone by release; nothing done for several gateway processes or a single CPU."""

from __future__ import annotations

import os
import threading

import pytest

from gateway.runtime.loop_cpu import LoopCpu, helper_cpus
from gateway.runtime.worker_pool import PROCESSES_ENV


def in_thread(fn):
    """Run ``fn`` in a thread of its own (affinity calls act on the calling thread)."""
    out = {}

    def run() -> None:
        out["value"] = fn()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out["value"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_loop_thread_keeps_one_cpu_and_the_others_are_handed_out():
    allowed = os.sched_getaffinity(0)

    def pin_and_release():
        loop = LoopCpu()
        others = loop.reserve()
        pinned = os.sched_getaffinity(0)
        again = loop.reserve()  # idempotent
        helpers = helper_cpus()  # what the turn model's process is placed on
        loop.release()
        return others, pinned, again, helpers, os.sched_getaffinity(0)

    others, pinned, again, helpers, after = in_thread(pin_and_release)
    assert pinned == {min(allowed)} and set(others) == allowed - pinned and again == others
    assert helpers == others and helper_cpus() == ()
    assert after == allowed


def test_nothing_is_pinned_when_several_gateway_processes_share_the_machine(monkeypatch):
    monkeypatch.setenv(PROCESSES_ENV, "2")
    before = os.sched_getaffinity(0)

    def reserve():
        loop = LoopCpu()
        return loop.reserve(), os.sched_getaffinity(0)

    others, affinity = in_thread(reserve)
    assert others == () and affinity == before
