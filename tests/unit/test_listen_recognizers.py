"""Recogniser specs and the Whisper options' arithmetic (no model loaded)."""

from __future__ import annotations

import pytest

from gateway.listen.openai_asr import OpenAITranscriber, OpenAITranscriptionConfig
from gateway.listen.recognizers import build_recognizer, parse_recognizer_spec
from gateway.listen.whisper_asr import WhisperOptions, WhisperRecognizer


def test_whisper_specs():
    assert parse_recognizer_spec("whisper:tiny.en") == WhisperOptions()
    assert parse_recognizer_spec("") == WhisperOptions()
    assert parse_recognizer_spec("whisper") == WhisperOptions()
    opts = parse_recognizer_spec("whisper:/models/small?threads=1&workers=2&min_frames=1500"
                                 "&compute=int8_float32")
    assert opts == WhisperOptions(model="/models/small", cpu_threads=1, workers=2,
                                  min_frames=1500, compute_type="int8_float32")
    assert parse_recognizer_spec("whisper:tiny.en?idle=0&nice=10") == WhisperOptions(
        idle=False, nice=10)
    assert WhisperOptions().idle  # SCHED_IDLE by default
    assert WhisperOptions().process  # in child processes by default
    assert parse_recognizer_spec("whisper?process=0&idle=0") == WhisperOptions(
        process=False, idle=False)  # the model name may be left out before a query
    with pytest.raises(ValueError, match="process must be 0 or 1"):
        parse_recognizer_spec("whisper?process=yes")


def test_openai_specs():
    config = parse_recognizer_spec("openai+http://127.0.0.1:8000/v1?model=Systran/x&language=en"
                                   "&timeout=5&key_env=ASR_KEY&partials=0")
    assert config == OpenAITranscriptionConfig(
        base_url="http://127.0.0.1:8000/v1", model="Systran/x", language="en", timeout=5.0,
        connect_timeout=3.0, api_key_env="ASR_KEY", max_partials=0)
    assert config.endpoint == "http://127.0.0.1:8000/v1/audio/transcriptions"
    bare = parse_recognizer_spec("openai+https://asr.example:443")
    assert isinstance(bare, OpenAITranscriptionConfig)
    assert bare.base_url == "https://asr.example:443/v1" and bare.model == "whisper-1"


@pytest.mark.parametrize("spec", ["vosk", "whisper:tiny.en?beam=5", "whisper:x?threads=two",
                                  "whisper?idle=yes",
                                  "openai+http://h:1/v1?colour=red", "openai+ftp://h/v1",
                                  "openai+http:///v1", "whisper:x?min_frames=5000"])
def test_bad_specs_are_refused(spec):
    with pytest.raises(ValueError):
        parse_recognizer_spec(spec)


def test_build_recognizer_makes_the_backend_without_loading_anything():
    assert isinstance(build_recognizer(), WhisperRecognizer)
    rec = build_recognizer("openai+http://127.0.0.1:9/v1")
    assert isinstance(rec, OpenAITranscriber) and rec.name == "127.0.0.1"


def test_encoder_context_is_sized_to_the_segment_with_a_floor():
    opts = WhisperOptions()
    assert opts.context_frames(2 * 16000) == 1000  # 2 s -> the 10 s floor
    assert opts.context_frames(12 * 16000) == 1200 + 50
    assert opts.context_frames(40 * 16000) == 3000
    assert WhisperOptions(min_frames=500).context_frames(16000) == 500


def test_output_tokens_are_capped_by_the_audio_length():
    opts = WhisperOptions()
    assert opts.max_new_tokens(2.0) == 28
    assert opts.max_new_tokens(60.0) == 220


def test_the_decoding_processes_cpus_are_part_of_the_spec():
    assert parse_recognizer_spec("whisper?cpus=1").cpus == (1,)
    assert parse_recognizer_spec("whisper:tiny.en?cpus=1,2&threads=2").cpus == (1, 2)
    assert parse_recognizer_spec("whisper").cpus is None  # auto: all but the loop's
    assert parse_recognizer_spec("whisper?cpus=auto").cpus is None
    assert parse_recognizer_spec("whisper?cpus=all").cpus == ()
    with pytest.raises(ValueError):
        parse_recognizer_spec("whisper?cpus=one")


def test_a_child_placed_on_fewer_cpus_decodes_on_no_more_threads_than_it_has():
    import os
    import threading

    from gateway.listen.whisper_engine import WhisperOptions
    from gateway.listen.whisper_process import _place

    cpu = min(os.sched_getaffinity(0))
    seen = {}

    def child() -> None:  # a thread of its own: the affinity set is the calling thread's
        seen["options"] = _place(WhisperOptions(cpu_threads=2, cpus=(cpu,)))
        seen["affinity"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=child)
    thread.start()
    thread.join()
    assert seen["affinity"] == {cpu} and seen["options"].cpu_threads == 1
    assert _place(WhisperOptions(cpu_threads=2)).cpu_threads == 2  # no cpus: left alone
