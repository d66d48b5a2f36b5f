"""A semantic end-of-turn model: has the user finished, judged from the turn's audio.

``TurnModel`` is the interface (``probability(audio16k)`` -> P(the turn is complete)); the
policy that uses it is ``SemanticEndpointing`` in turns.py and the listener's glue is
``TurnJudge`` below. ``SmartTurnModel`` is Pipecat's Smart Turn v3.2 (CPU ONNX file, installed
from the pipecat-ai wheel: smart_turn_files.py) on onnxruntime with one intra-op thread: its
input is the last 8 s as Whisper log-mel features (turn_features.py), its output a sigmoid.

``TurnJudge`` runs one listener's inferences off the event loop on a process-wide one-thread
executor (which by default only waits on the model's own process: turn_process.py): at most
one inference per listener in flight, and a request made while one runs replaces the one
waiting (latest audio wins), so no listener can queue unbounded work. The verdict comes back
on the loop through a callback with the request's key; the caller ignores keys it no longer
wants (the user spoke again).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gateway.listen.audio import as_float32
from gateway.listen.smart_turn_files import model_path
from gateway.listen.turn_features import log_mel

log = logging.getLogger(__name__)


@runtime_checkable
class TurnModel(Protocol):
    name: str

    def probability(self, audio16k: np.ndarray) -> float:
        """P(the speaker has finished their turn) for a turn's audio so far (blocking)."""
        ...


@functools.cache
def _session(path: str) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 4
    return onnxruntime.InferenceSession(path, sess_options=options,
                                        providers=["CPUExecutionProvider"])


class SmartTurnModel:
    """Smart Turn v3.2 (CPU). One ONNX session per process (onnxruntime sessions are
    thread-safe); loading costs ~0.1 s, so ``turn_loader.load_turn_model`` is called at start-up."""

    name = "smart-turn"

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path or model_path())
        self._session = _session(self.path)

    def probability(self, audio16k: np.ndarray) -> float:
        features = log_mel(as_float32(audio16k))[np.newaxis]
        (out,) = self._session.run(None, {"input_features": features})
        return float(np.asarray(out).reshape(-1)[0])


@functools.cache
def judges_executor() -> concurrent.futures.ThreadPoolExecutor:
    """One thread for every listener's turn model (a CPU model: more threads than cores buy
    nothing; Whisper has its own pool)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="turn-model")


@dataclass(frozen=True, slots=True)
class Verdict:
    key: object
    probability: float
    seconds: float  # the inference's own time (features + model)


class TurnJudge:
    """One listener's bounded access to a ``TurnModel`` (see the module's docstring)."""

    def __init__(self, model: TurnModel, on_verdict: Callable[[Verdict], None],
                 executor: concurrent.futures.Executor | None = None) -> None:
        self.model = model
        self.on_verdict = on_verdict
        self._executor = executor or judges_executor()
        self._running: asyncio.Future[Verdict] | None = None
        self._waiting: tuple[object, np.ndarray] | None = None
        self._closed = False
        self.inferences = 0
        self.replaced = 0  # requests dropped for a newer one before they ran
        self.failures = 0

    def request(self, key: object, audio16k: np.ndarray) -> None:
        if self._closed:
            return
        if self._running is not None:
            if self._waiting is not None:
                self.replaced += 1
            self._waiting = (key, audio16k)
            return
        self._start(key, audio16k)

    def _start(self, key: object, audio16k: np.ndarray) -> None:
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._infer, key, audio16k)
        self._running = future
        future.add_done_callback(self._done)
        self.inferences += 1

    def _infer(self, key: object, audio16k: np.ndarray) -> Verdict:
        started = time.perf_counter()
        probability = self.model.probability(audio16k)
        return Verdict(key, probability, time.perf_counter() - started)

    def _done(self, future: asyncio.Future[Verdict]) -> None:
        self._running = None
        verdict = None
        if not future.cancelled():
            if (error := future.exception()) is not None:
                self.failures += 1
                log.warning("turn model failed: %r", error)
            else:
                verdict = future.result()
        if self._closed:
            return
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            self._start(*waiting)
        if verdict is not None:
            self.on_verdict(verdict)

    async def idle(self) -> None:
        """Until no inference runs or waits (its verdict delivered)."""
        while self._running is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.shield(self._running)
            await asyncio.sleep(0)  # the done callback (and the next start) run first

    def cancel_waiting(self) -> None:
        """Drop a request that has not started (its answer is no longer wanted)."""
        self._waiting = None

    def close(self) -> None:
        self._closed = True
        self._waiting = None
        if self._running is not None:
            with contextlib.suppress(Exception):
                self._running.cancel()
