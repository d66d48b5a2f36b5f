"""A partial Whisper decode gives way to a final that arrives while it runs: it stops between its
encoder pass and its decoding and reports nothing (None), and the final runs next. A scripted
stand-in for the CTranslate2 model (no weights): the order of things is exact."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np

from gateway.listen.whisper_asr import WhisperOptions, WhisperRecognizer


class Tokenizer:
    eot = 100

    def decode(self, tokens: list[int]) -> str:
        return " ".join(f"w{t}" for t in tokens)


class ScriptedModel:
    """``encode`` of the first call waits for ``release``; ``generate`` answers [1, 2]."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.encoding = threading.Event()
        self.encodes = 0
        self.generated: list[int] = []  # encode number each generate followed
        self.model = SimpleNamespace(generate=self._generate)

    def feature_extractor(self, audio: np.ndarray) -> np.ndarray:
        return np.zeros((80, max(1, len(audio) // 160)), dtype=np.float32)

    def encode(self, features: np.ndarray) -> int:
        self.encodes += 1
        if self.encodes == 1:
            self.encoding.set()
            assert self.release.wait(5.0)
        return self.encodes

    def _generate(self, encoded: int, prompts: list[list[int]], **_: Any) -> list[Any]:
        self.generated.append(encoded)
        return [SimpleNamespace(sequences_ids=[[1, 2, Tokenizer.eot]], scores=[-0.1],
                                no_speech_prob=0.0)]


def recognizer(model: ScriptedModel) -> WhisperRecognizer:
    rec = WhisperRecognizer(WhisperOptions(workers=1, process=False))  # in this process
    engine = rec.engine
    engine._model = model
    engine._tokenizer = Tokenizer()
    engine._prompt = [50257, 50362]
    engine._suppress = []
    return rec


async def test_a_partial_stops_for_a_final_that_arrives_while_it_encodes():
    model = ScriptedModel()
    rec = recognizer(model)
    audio = np.zeros(32_000, dtype=np.int16)
    partial = asyncio.ensure_future(rec.transcribe(audio, final=False))
    assert await asyncio.to_thread(model.encoding.wait, 5.0)  # the partial is encoding
    final = asyncio.ensure_future(rec.transcribe(audio, final=True))
    await asyncio.sleep(0)  # one step: the task submits its job before its first await
    assert rec._pool.queued == 1  # the final is queued behind the partial
    model.release.set()
    assert await asyncio.wait_for(partial, 5.0) is None  # gave way: no text
    transcript = await asyncio.wait_for(final, 5.0)
    assert transcript is not None and transcript.final and transcript.text == "w1 w2"
    assert model.generated == [2]  # only the final was decoded; the partial stopped after encode
    assert rec.superseded == 1 and rec.skipped == 0
    await rec.close()


async def test_a_partial_with_no_final_waiting_runs_to_the_end():
    model = ScriptedModel()
    model.release.set()
    rec = recognizer(model)
    transcript = await rec.transcribe(np.zeros(32_000, dtype=np.int16), final=False)
    assert transcript is not None and not transcript.final and transcript.text == "w1 w2"
    assert model.generated == [1] and rec.superseded == 0
    await rec.close()
