"""The turn model in its own child process (listen/turn_process.py): the same verdict as the
model run here, computed in another process placed on the CPUs it is given, a child that dies
or is closed started again by the next request, and a ``TurnJudge`` over it delivering its
verdict on the loop."""

from __future__ import annotations

import asyncio
import os
import signal

import numpy as np
import pytest

from gateway.listen import smart_turn_files
from tests.installed import need_module

need_module("onnxruntime", "the [listen] extra")


def noise(seconds: float, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(16_000 * seconds)) * 0.1).astype(np.float32)


@pytest.fixture
def process_model():
    from gateway.listen.turn_process import TurnModelProcess

    model = TurnModelProcess(smart_turn_files.model_path(), cpus=())
    yield model
    model.close()


def test_the_child_answers_as_the_model_here_and_reads_only_the_last_8_s(process_model):
    from gateway.listen.turn_model import SmartTurnModel

    here = SmartTurnModel(smart_turn_files.model_path())
    long = noise(20.0)  # the parent sends the last 8 s only: the model's own window
    assert process_model.probability(long) == pytest.approx(here.probability(long), abs=1e-5)
    assert process_model.pid is not None and process_model.pid != os.getpid()
    assert process_model.process.name == "turn-model"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_child_runs_on_the_cpus_it_is_given():
    from gateway.listen.turn_process import TurnModelProcess

    cpu = max(os.sched_getaffinity(0))
    model = TurnModelProcess(smart_turn_files.model_path(), cpus=(cpu,))
    try:
        model.start()
        assert os.sched_getaffinity(model.pid) == {cpu}
    finally:
        model.close()


def test_a_dead_or_closed_child_is_started_again(process_model):
    audio = noise(2.0)
    first = process_model.probability(audio)
    os.kill(process_model.pid, signal.SIGKILL)
    process_model.process.join(5)
    assert process_model.probability(audio) == pytest.approx(first, abs=1e-6)
    process_model.close()
    assert not process_model.process.is_alive() if process_model.process else True
    assert process_model.probability(audio) == pytest.approx(first, abs=1e-6)
    assert process_model.starts == 3


async def test_a_judge_over_the_process_delivers_on_the_loop(process_model):
    from gateway.listen.turn_model import TurnJudge

    await asyncio.to_thread(process_model.start)
    got = []
    judge = TurnJudge(process_model, got.append)
    judge.request("k", noise(3.0))
    await asyncio.wait_for(judge.idle(), 30)
    judge.close()
    assert [v.key for v in got] == ["k"] and 0.0 <= got[0].probability <= 1.0
