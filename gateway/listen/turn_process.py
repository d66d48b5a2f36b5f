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
process-wide model outlives any one factory's close). Protocol on a ``multiprocessing`` pipe:
the child sends ``("ready", None)`` or ``("error", why)``; then for each float32 array it answers
``("ok", probability)`` or ``("error", why)``; ``None`` or the pipe's end stops it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from gateway.listen.audio import as_float32
from gateway.listen.turn_features import SAMPLES

START_TIMEOUT_S = 60.0  # spawn, import numpy + onnxruntime, load and warm the model
REPLY_TIMEOUT_S = 10.0  # one inference (~10-150 ms); longer: the child is stuck, restart it
STOP_TIMEOUT_S = 2.0


class TurnModelError(RuntimeError):
    pass


def serve(conn: Connection, path: str, cpus: tuple[int, ...]) -> None:
    """The child's main: placed, loaded and warmed, then one inference per message."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, set(cpus))
    from gateway.listen.turn_model import SmartTurnModel

    try:
        model = SmartTurnModel(path)
        model.probability(np.zeros(16_000, dtype=np.float32))  # first-run allocations
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if message is None:
            return
        try:
            reply: tuple[str, Any] = ("ok", model.probability(message))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class TurnModelProcess:
    """A ``TurnModel`` whose inference runs in a child process (see the module's docstring)."""

    name = "smart-turn"

    def __init__(self, path: str | Path | None = None,
                 cpus: tuple[int, ...] | None = None) -> None:
        from gateway.listen.smart_turn_files import model_path

        self.path = str(path or model_path())  # FileNotFoundError now, not in the child
        self.cpus = cpus  # None: runtime.loop_cpu.helper_cpus() when the child starts
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self.process: Any = None
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Start the child if it is not running and wait for its model (a thread's job)."""
        with self._lock:
            self._ensure()

    def _ensure(self) -> None:
        if self._conn is not None and self.process is not None and self.process.is_alive():
            return
        self._kill()
        from gateway.runtime.loop_cpu import helper_cpus

        cpus = helper_cpus() if self.cpus is None else self.cpus
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=serve, args=(child, self.path, cpus),
                                    name="turn-model", daemon=True)
        process.start()
        child.close()
        self._conn, self.process = parent, process
        self.starts += 1
        if not parent.poll(START_TIMEOUT_S):
            self._kill()
            raise TurnModelError(f"the turn model process did not start in {START_TIMEOUT_S} s")
        try:
            kind, detail = parent.recv()
        except EOFError:
            self._kill()
            raise TurnModelError("the turn model process exited at start") from None
        if kind != "ready":
            self._kill()
            raise TurnModelError(f"the turn model failed to load: {detail}")

    def probability(self, audio16k: np.ndarray) -> float:
        # the model reads the last 8 s only (turn_features): send no more down the pipe
        audio = as_float32(np.asarray(audio16k)[-SAMPLES:])
        with self._lock:
            self._ensure()
            assert self._conn is not None
            try:
                self._conn.send(audio)
                if not self._conn.poll(REPLY_TIMEOUT_S):
                    raise TurnModelError(f"no verdict in {REPLY_TIMEOUT_S} s")
                kind, value = self._conn.recv()
            except (EOFError, BrokenPipeError, OSError, TurnModelError) as exc:
                self._kill()
                raise TurnModelError(f"the turn model process failed: {exc!r}") from None
        if kind != "ok":
            raise TurnModelError(f"the turn model failed: {value}")
        return float(value)

    def close(self) -> None:
        """Stop the child (a later ``probability`` starts it again)."""
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._conn.send(None)
            if self.process is not None:
                self.process.join(STOP_TIMEOUT_S)
            self._kill()

    def _kill(self) -> None:
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join(STOP_TIMEOUT_S)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
