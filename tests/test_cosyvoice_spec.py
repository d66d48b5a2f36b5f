"""CosyVoice voice specs -> config dataclass -> Synthesizer."""

from __future__ import annotations

import wave
from pathlib import Path

import pytest

from gateway.tts.base import Synthesizer
from gateway.tts.cosyvoice_grpc import CosyVoiceGrpc
from gateway.tts.cosyvoice_http import CosyVoiceHttp
from gateway.tts.cosyvoice_spec import CosyVoiceConfig, parse_cosyvoice_spec
from gateway.tts.registry import build_cosyvoice


@pytest.fixture
def wav(tmp_path: Path) -> Path:
    path = tmp_path / "p.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(b"\0\0" * 160)
    return path


def test_http_sft():
    c = parse_cosyvoice_spec("cosyvoice+http://host:50000?mode=sft&spk_id=中文女&rate=22050"
                             "&method=GET")
    assert c == CosyVoiceConfig("http", "host", 50000, mode="sft", spk_id="中文女")
    assert c.endpoint_url == "http://host:50000/inference_sft"


def test_http_defaults_and_options():
    c = parse_cosyvoice_spec("cosyvoice+https://tts.local/api/?spk_id=%E4%B8%AD&method=post"
                             "&rate=24000&timeout=2.5&chunk_timeout=4")
    assert (c.port, c.mode, c.spk_id, c.method, c.sample_rate) == (50000, "sft", "中", "POST",
                                                                   24000)
    assert (c.tls, c.first_chunk_timeout, c.chunk_timeout) == (True, 2.5, 4.0)
    assert c.endpoint_url == "https://tts.local:50000/api/inference_sft"
    assert c.sample_format == "s16"


def test_stream_path_means_float32():
    c = parse_cosyvoice_spec("cosyvoice+http://h:1/stream?spk_id=a")
    assert (c.base_path, c.sample_format) == ("/stream", "f32")
    assert parse_cosyvoice_spec("cosyvoice+http://h:1/stream?spk_id=a&format=s16").sample_format \
        == "s16"


def test_grpc_zero_shot(wav):
    c = parse_cosyvoice_spec(f"cosyvoice+grpc://[::1]:50001?mode=zero_shot&prompt_wav={wav}"
                             "&prompt_text=hi%20there%26more")
    assert (c.transport, c.host, c.port, c.mode) == ("grpc", "::1", 50001, "zero_shot")
    assert (c.prompt_wav, c.prompt_text) == (str(wav), "hi there&more")
    assert c.grpc_target == "[::1]:50001"


@pytest.mark.parametrize("mode,query", [
    ("cross_lingual", "prompt_wav=W"),
    ("instruct", "spk_id=a&instruct_text=b"),
    ("instruct2", "instruct_text=b&prompt_wav=W"),
])
def test_every_mode(mode, query, wav):
    spec = f"cosyvoice+http://h?mode={mode}&{query.replace('W', str(wav))}"
    assert build_cosyvoice(spec, "v").config.mode == mode  # type: ignore[attr-defined]


def test_build(wav):
    http = build_cosyvoice("cosyvoice+http://127.0.0.1:9?spk_id=a", "voice-a")
    grpc = build_cosyvoice(f"cosyvoice+grpc://127.0.0.1:9?mode=cross_lingual&prompt_wav={wav}",
                           "voice-b")
    assert isinstance(http, CosyVoiceHttp) and isinstance(grpc, CosyVoiceGrpc)
    assert isinstance(http, Synthesizer) and isinstance(grpc, Synthesizer)
    assert (http.name, grpc.name) == ("voice-a", "voice-b")


@pytest.mark.parametrize("spec,message", [
    ("http://h?spk_id=a", "scheme must be one of"),
    ("cosyvoice+ftp://h?spk_id=a", "scheme must be one of"),
    ("cosyvoice+http://?spk_id=a", "no host"),
    ("cosyvoice+http://h:99999?spk_id=a", "bad port|out of range"),
    ("cosyvoice+http://h?spk_id=a&voice=b", "unknown key 'voice'"),
    ("cosyvoice+http://h?spk_id=a&spk_id=b", "spk_id given twice"),
    ("cosyvoice+http://h?mode=karaoke", "mode must be one of"),
    ("cosyvoice+http://h?mode=sft", "mode sft needs spk_id"),
    ("cosyvoice+http://h?mode=sft&spk_id=", "mode sft needs spk_id"),
    ("cosyvoice+http://h?mode=zero_shot&prompt_text=x", "needs prompt_wav"),
    ("cosyvoice+http://h?mode=instruct&spk_id=a", "needs instruct_text"),
    ("cosyvoice+http://h?spk_id=a&prompt_text=b", "prompt_text is not used by mode sft"),
    ("cosyvoice+http://h?spk_id=a&rate=fast", "rate='fast' is not a number"),
    ("cosyvoice+http://h?spk_id=a&rate=8", "not a plausible sample rate"),
    ("cosyvoice+http://h?spk_id=a&timeout=0", "timeouts must be positive"),
    ("cosyvoice+http://h?spk_id=a&timeout=nan", "timeouts must be positive"),
    ("cosyvoice+http://h?spk_id=a&method=PUT", "method must be GET or POST"),
    ("cosyvoice+http://h?spk_id=a&format=f64", "format must be s16 or f32"),
    ("cosyvoice+http://u:p@h?spk_id=a", "credentials"),
    ("cosyvoice+http://h?spk_id", "malformed query"),
    ("cosyvoice+grpc://h?mode=instruct2&instruct_text=a&prompt_wav=x", "HTTP only"),
    ("cosyvoice+grpc://h?spk_id=a&method=POST", "method applies to HTTP only"),
    ("cosyvoice+grpc://h/base?spk_id=a", "a URL path applies to HTTP only"),
])
def test_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_cosyvoice_spec(spec)
    assert repr(spec) in str(info.value)


def test_missing_prompt_file_fails_at_build(tmp_path):
    spec = f"cosyvoice+http://h?mode=cross_lingual&prompt_wav={tmp_path / 'none.wav'}"
    with pytest.raises(ValueError, match="cannot read prompt_wav"):
        build_cosyvoice(spec, "v")


def test_config_validates_direct_construction():
    with pytest.raises(ValueError, match="needs spk_id"):
        CosyVoiceConfig("http", "h")
    with pytest.raises(ValueError, match="transport must be"):
        CosyVoiceConfig("ws", "h", spk_id="a")  # type: ignore[arg-type]
