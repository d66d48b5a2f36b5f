"""A child process that holds a Whisper model and decodes what it is sent, one clip at a time.

Why a process: a decode is mostly native code that drops the GIL, but not all of it (feature
extraction, tokenising, the loop checks), and a thread of ours holding the GIL when the kernel
preempts it keeps the event loop that paces every stream waiting until it runs again. At
SCHED_IDLE (so that decoding takes only spare CPU) that wait is unbounded when the machine is
busy: measured, 5 ms loop sleeps ran 17-35 ms late under outside load with SCHED_IDLE decode
threads (7-9 ms at nice 5). A child process shares no GIL with the loop, so its priority can
be as low as we like. (LiveKit's agents run their inference models in a separate process for
the same reason.)

The lifecycle (spawn, ready with a timeout, errors, stop and kill) is child_process.py's, shared
with the turn model's process; the messages here: ``(audio, final)`` in, ``("ok",
DecodeResult)``, ``("superseded", None)`` or ``("error", why)`` out. Whether a final decode is
waiting (a partial's cue to give way) is a shared integer the parent keeps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from gateway.listen import child_process
from gateway.listen.asr import RecognitionError
from gateway.listen.child_process import ChildProcess, Handler, Reply
from gateway.listen.whisper_engine import DecodeResult, Superseded, WhisperEngine, WhisperOptions

START_TIMEOUT_S = 120.0  # spawn, import faster-whisper, load and warm the model
STOP_TIMEOUT_S = 2.0


def _place(options: WhisperOptions) -> WhisperOptions:
    """The child's CPUs (``cpus``: e.g. the cores the event loop is not pinned to), before
    CTranslate2 starts its threads (they inherit them); no more decoding threads than CPUs."""
    if not options.cpus or not hasattr(os, "sched_setaffinity"):
        return options
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, set(options.cpus))
    return dataclasses.replace(options, cpu_threads=min(options.cpu_threads, len(options.cpus)))


def _lower_priority(options: WhisperOptions) -> None:
    """The whole child (threads CTranslate2 starts later inherit it)."""
    if options.idle and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
    if options.nice > 0:
        with contextlib.suppress(OSError):
            os.nice(options.nice)


def serve(conn: Connection, options: WhisperOptions, finals_waiting: Any) -> None:
    """The child's main: placed and lowered, the model loaded and warmed, then one decode per
    message (child_process.serve: ready, replies, stop)."""

    def load() -> Handler:
        placed = _place(options)
        _lower_priority(placed)
        engine = WhisperEngine(placed, final_waiting=lambda: finals_waiting.value > 0)
        engine.warm_up()

        def decode(message: tuple[np.ndarray, bool]) -> Reply:
            audio, final = message
            try:
                return ("ok", engine.transcribe(audio, final))
            except Superseded:
                return ("superseded", None)

        return decode

    child_process.serve(conn, load)


class EngineProcess:
    """The parent's handle on one child: blocking calls, for one worker thread at a time.
    A child that died is started again by the next call (counted in ``restarts``)."""

    def __init__(self, options: WhisperOptions, finals_waiting: Any) -> None:
        self.options = options
        self._finals = finals_waiting
        self._child = ChildProcess("whisper", RecognitionError, start_timeout_s=START_TIMEOUT_S,
                                   stop_timeout_s=STOP_TIMEOUT_S)
        self.restarts = 0
        self._closed = False

    @property
    def pid(self) -> int | None:
        return self._child.pid

    @property
    def process(self) -> Any:
        return self._child.process

    def start(self) -> None:
        """Start the child and wait until its model is warm (seconds: a worker thread's job)."""
        if self._closed:
            raise RecognitionError("whisper is closed")
        self._child.start(serve, self.options, self._finals)

    def transcribe(self, audio: np.ndarray, final: bool) -> DecodeResult:
        if not self._child.running:
            if self._child.process is not None:
                self.restarts += 1
            self.start()
        kind, value = self._child.request((audio, final))
        if kind == "ok":
            return value  # type: ignore[no-any-return]
        if kind == "superseded":
            raise Superseded
        raise RecognitionError(f"whisper failed: {value}")

    def close(self) -> None:
        """Ask the child to stop; kill it if it does not within ``STOP_TIMEOUT_S``."""
        self._closed = True
        self._child.close()
