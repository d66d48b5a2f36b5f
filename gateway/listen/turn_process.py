"""The turn model in a child process of its own, on the CPUs the event loop is not pinned to.

Why: ``SmartTurnModel.probability`` is numpy (the log-mel features: GIL held) and onnxruntime
(GIL released, but one core busy). On a thread of the gateway it runs on the loop's own core
(threads inherit the loop thread's pinning, runtime/loop_cpu.py) and takes the GIL from the loop
while it computes features; in a child there is no GIL to share, and the child is placed on the
cores ``LoopCpu`` leaves to helpers (Whisper's children run there too, at SCHED_IDLE: the turn
model, at normal priority, goes first). What the loop sees either way: bench/turn_offload.py.

``TurnModelProcess`` is a ``TurnModel``: ``probability`` is blocking (``TurnJudge`` calls it on
its one executor thread, which then only waits on a pipe). One request at a time (a lock); the
child is started on first use or by ``start`` and again after it died or was closed (a
process-wide model outlives any one factory's close). The lifecycle (spawn, ready with a
timeout, errors, stop and kill) is child_process.py's, shared with Whisper's processes; the
messages here: a float32 array in, ``("ok", probability)`` or ``("error", why)`` out.
"""

from __future__ import annotations

import contextlib
import os
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from gateway.listen import child_process
from gateway.listen.audio import as_float32
from gateway.listen.child_process import ChildProcess, Handler
from gateway.listen.turn_features import SAMPLES

START_TIMEOUT_S = 60.0  # spawn, import numpy + onnxruntime, load and warm the model
REPLY_TIMEOUT_S = 10.0  # one inference (~10-150 ms); longer: the child is stuck, restart it
STOP_TIMEOUT_S = 2.0


class TurnModelError(RuntimeError):
    pass


def serve(conn: Connection, path: str, cpus: tuple[int, ...]) -> None:
    """The child's main: placed, loaded and warmed, then one inference per message
    (child_process.serve: ready, replies, stop)."""

    def load() -> Handler:
        if cpus and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, set(cpus))
        from gateway.listen.turn_model import SmartTurnModel

        model = SmartTurnModel(path)
        model.probability(np.zeros(16_000, dtype=np.float32))  # first-run allocations
        return lambda audio: ("ok", model.probability(audio))

    child_process.serve(conn, load)


class TurnModelProcess:
    """A ``TurnModel`` whose inference runs in a child process (see the module's docstring)."""

    name = "smart-turn"

    def __init__(self, path: str | Path | None = None,
                 cpus: tuple[int, ...] | None = None) -> None:
        from gateway.listen.smart_turn_files import model_path

        self.path = str(path or model_path())  # FileNotFoundError now, not in the child
        self.cpus = cpus  # None: runtime.loop_cpu.helper_cpus() when the child starts
        self._lock = threading.Lock()
        self._child = ChildProcess("turn-model", TurnModelError, label="turn model",
                                   start_timeout_s=START_TIMEOUT_S,
                                   stop_timeout_s=STOP_TIMEOUT_S)

    @property
    def pid(self) -> int | None:
        return self._child.pid

    @property
    def process(self) -> Any:
        return self._child.process

    @property
    def starts(self) -> int:
        return self._child.starts

    def start(self) -> None:
        """Start the child if it is not running and wait for its model (a thread's job)."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> None:
        if self._child.running:
            return
        from gateway.runtime.loop_cpu import helper_cpus

        cpus = helper_cpus() if self.cpus is None else self.cpus
        self._child.start(serve, self.path, cpus)

    def probability(self, audio16k: np.ndarray) -> float:
        # the model reads the last 8 s only (turn_features): send no more down the pipe
        audio = as_float32(np.asarray(audio16k)[-SAMPLES:])
        with self._lock:
            self._ensure()
            kind, value = self._child.request(audio, timeout_s=REPLY_TIMEOUT_S)
        if kind != "ok":
            raise TurnModelError(f"the turn model failed: {value}")
        return float(value)

    def close(self) -> None:
        """Stop the child (a later ``probability`` starts it again)."""
        with self._lock:
            self._child.close()
