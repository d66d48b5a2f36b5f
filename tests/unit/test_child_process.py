"""The child-process lifecycle Whisper's and the turn model's processes share
(listen/child_process.py): spawn and wait for ready, every failure -- a load error, an exit at
start, no ready in time, a death or a hang mid-request, an error reply -- raised as the
caller's error type with the child gone, and a polite stop."""

from __future__ import annotations

import os

import pytest

from gateway.listen.child_process import ChildProcess
from tests import child_targets


class ModelError(RuntimeError):
    pass


@pytest.fixture
def child():
    handle = ChildProcess("test-child", ModelError, start_timeout_s=30, label="test model")
    yield handle
    handle.kill()


def test_a_child_answers_in_its_own_process_and_stops_when_asked(child):
    child.start(child_targets.echo, "> ")
    assert child.running and child.starts == 1
    assert child.request("hello") == ("ok", "> hello")
    kind, pid = child.request("pid")
    assert kind == "ok" and pid == child.pid != os.getpid()
    assert child.process.name == "test-child"
    child.close()
    assert not child.running and child.exitcode == 0  # it left on the stop message


def test_an_error_in_the_handler_is_a_reply_and_the_child_serves_on(child):
    child.start(child_targets.echo, "")
    assert child.request("raise") == ("error", "ValueError: asked to")
    assert child.request("still") == ("ok", "still")


def test_a_model_that_fails_to_load_is_the_callers_error(child):
    with pytest.raises(ModelError, match="test model failed to load: FileNotFoundError: no model"):
        child.start(child_targets.fails_to_load)
    assert not child.running


def test_a_child_that_exits_at_start_is_reported_with_its_code(child):
    with pytest.raises(ModelError, match=r"exited at start \(code 7\)"):
        child.start(child_targets.exits_at_start)
    assert not child.running


def test_a_child_not_ready_in_time_is_killed():
    child = ChildProcess("test-child", ModelError, start_timeout_s=0.5)
    with pytest.raises(ModelError, match=r"did not start in 0.5 s"):
        child.start(child_targets.slow_to_load, 30.0)
    assert not child.running and not child.process.is_alive()


def test_a_death_mid_request_is_reported_and_a_new_start_works(child):
    child.start(child_targets.echo, "")
    with pytest.raises(ModelError, match=r"died \(exit code 3\)"):
        child.request("die")
    assert not child.running
    with pytest.raises(ModelError, match="not running"):
        child.request("x")
    child.start(child_targets.echo, "again ")
    assert child.request("x") == ("ok", "again x") and child.starts == 2


def test_a_child_stuck_on_a_request_is_killed_after_the_timeout(child):
    child.start(child_targets.echo, "")
    process = child.process
    with pytest.raises(ModelError, match="died"):
        child.request("hang", timeout_s=0.3)
    assert not process.is_alive() and not child.running


def test_starting_again_replaces_the_running_child(child):
    child.start(child_targets.echo, "a")
    first = child.process
    child.start(child_targets.echo, "b")
    assert not first.is_alive() and child.request("") == ("ok", "b")
