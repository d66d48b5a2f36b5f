"""A child process that holds a Whisper model and decodes what it is sent, one clip at a time.

Why a process: a decode is mostly native code that drops the GIL, but not all of it (feature
extraction, tokenising, the loop checks), and a thread of ours holding the GIL when the kernel
preempts it keeps the event loop that paces every stream waiting until it runs again. At
SCHED_IDLE (so that decoding takes only spare CPU) that wait is unbounded when the machine is
busy: measured, 5 ms loop sleeps ran 17-35 ms late under outside load with SCHED_IDLE decode
threads (7-9 ms at nice 5). A child process shares no GIL with the loop, so its priority can
be as low as we like. (LiveKit's agents run their inference models in a separate process for
the same reason.)

The protocol on a ``multiprocessing`` pipe: the child sends ``("ready", None)`` once its model
is loaded and warmed (or ``("error", why)`` and exits); then for each ``(audio, final)`` it
receives it answers ``("ok", DecodeResult)``, ``("superseded", None)`` or ``("error", why)``;
``None`` or the pipe's end stops it. Whether a final decode is waiting (a partial's cue to give
way) is a shared integer the parent keeps.

The start method is ``spawn``: a fresh interpreter that imports only this module's needs (no
copy of the gateway's event loop, sockets or threads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from gateway.listen.asr import RecognitionError
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
    """The child's main: load, say ready, decode until told to stop or the parent is gone."""
    # The parent decides when we stop (a drain still needs its decodes); Ctrl-C and a
    # supervisor's SIGTERM to the process group are the parent's to handle.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    options = _place(options)
    _lower_priority(options)
    engine = WhisperEngine(options, final_waiting=lambda: finals_waiting.value > 0)
    try:
        engine.warm_up()
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
        audio, final = message
        try:
            reply: tuple[str, Any] = ("ok", engine.transcribe(audio, final))
        except Superseded:
            reply = ("superseded", None)
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


class EngineProcess:
    """The parent's handle on one child: blocking calls, for one worker thread at a time.
    A child that died is started again by the next call (counted in ``restarts``)."""

    def __init__(self, options: WhisperOptions, finals_waiting: Any) -> None:
        self.options = options
        self._finals = finals_waiting
        self._ctx = multiprocessing.get_context("spawn")
        self._conn: Connection | None = None
        self.process: Any = None
        self.restarts = 0
        self._closed = False

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Start the child and wait until its model is warm (seconds: a worker thread's job)."""
        if self._closed:
            raise RecognitionError("whisper is closed")
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=serve, args=(child, self.options, self._finals),
                                    name="whisper", daemon=True)
        process.start()
        child.close()
        self._conn, self.process = parent, process
        if not parent.poll(START_TIMEOUT_S):
            self._kill()
            raise RecognitionError(f"the whisper process did not start in {START_TIMEOUT_S} s")
        try:
            kind, detail = parent.recv()
        except EOFError:
            self._kill()
            raise RecognitionError(
                f"the whisper process exited at start (code {process.exitcode})") from None
        if kind != "ready":
            self._kill()
            raise RecognitionError(f"whisper failed to load: {detail}")

    def transcribe(self, audio: np.ndarray, final: bool) -> DecodeResult:
        if self._conn is None or not self.process.is_alive():
            if self.process is not None:
                self.restarts += 1
            self.start()
        assert self._conn is not None
        try:
            self._conn.send((audio, final))
            kind, value = self._conn.recv()
        except (EOFError, BrokenPipeError, OSError):
            code = self.process.exitcode if self.process is not None else None
            self._kill()
            raise RecognitionError(f"the whisper process died (exit code {code})") from None
        if kind == "ok":
            return value  # type: ignore[no-any-return]
        if kind == "superseded":
            raise Superseded
        raise RecognitionError(f"whisper failed: {value}")

    def close(self) -> None:
        """Ask the child to stop; kill it if it does not within ``STOP_TIMEOUT_S``."""
        self._closed = True
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

