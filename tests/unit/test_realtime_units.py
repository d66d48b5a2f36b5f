"""The Realtime protocol's pure parts: G.711, event parsing, session config, the outbox,
what a truncate keeps."""

from __future__ import annotations

import asyncio
import base64
import json

import numpy as np
import pytest

from gateway.listen.turns import SemanticOptions
from gateway.realtime import audio_formats as af
from gateway.realtime.config import SessionConfig
from gateway.realtime.outbox import Outbox
from gateway.realtime.protocol import (
    MAX_APPEND_BYTES,
    ClientError,
    decode_audio,
    parse_client_event,
)
from gateway.realtime.response import Clause, heard_transcript


def test_g711_tables_are_the_standards():
    # ITU-T G.711: mu-law 0xFF and A-law 0xD5 are the smallest positive codes
    assert af.ULAW_DECODE[0xFF] == 0 and af.ULAW_DECODE[0x00] == -32124
    assert af.ULAW_DECODE[0x80] == 32124
    assert af.ALAW_DECODE[0xD5] == 8 and af.ALAW_DECODE[0x55] == -8
    assert af.ALAW_DECODE[0xAA] == 32256
    for kind, table in ((af.PCMU, af.ULAW_DECODE), (af.PCMA, af.ALAW_DECODE)):
        codes = af.encode_g711(table, kind)  # every code's value encodes to a code of it
        assert (af.decode_g711(codes, kind) == table).all()


def test_formats_convert_with_their_rates():
    tone = (np.sin(np.arange(24_000) * 2 * np.pi * 440 / 24_000) * 8000).astype("<i2")
    out = af.OutputEncoder(af.PCMA).encode(tone.tobytes())
    assert 0 <= 8000 - len(out) < 400  # 8 kHz, a byte a sample (the filter holds < 50 ms)
    back = af.InputDecoder(af.PCMA, 16_000).decode(out)
    assert 0 <= 16_000 - len(back) < 1600
    with pytest.raises(af.BadAudio):
        af.InputDecoder(af.PCM, 16_000).decode(b"\x00\x01\x02")


@pytest.mark.parametrize(("text", "code"), [
    ("{", "invalid_json"), ("[]", "invalid_json"), ('{"type": 3}', "missing_required_parameter"),
    ('{"type": "x.y"}', "invalid_event_type"), ('{"type": "response.create", "event_id": 1}',
                                                "invalid_type"),
    ("[" * 100_000, "invalid_json"),
])
def test_bad_events_are_client_errors(text, code):
    with pytest.raises(ClientError) as caught:
        parse_client_event(text)
    assert caught.value.code == code


def test_append_limits():
    ok = {"audio": base64.b64encode(b"\0\0" * 10).decode()}
    assert decode_audio(ok) == b"\0\0" * 10
    with pytest.raises(ClientError) as caught:
        decode_audio({"audio": "A" * (MAX_APPEND_BYTES * 4 // 3 + 8), "event_id": "e"})
    assert (caught.value.code, caught.value.event_id) == ("audio_too_large", "e")
    with pytest.raises(ClientError):
        decode_audio({"audio": True})


def test_session_update_is_all_or_nothing():
    config = SessionConfig(model="m")
    assert config.vad is not None and config.vad.silence_duration_ms == 500
    with pytest.raises(ClientError):
        config.update({"instructions": "new", "audio": {"input": {"turn_detection": {
            "type": "server_vad", "threshold": 7}}}})
    assert config.instructions == ""  # nothing of the refused update applied
    config.update({"audio": {"input": {"turn_detection": {
        "type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 200,
        "silence_duration_ms": 300, "create_response": False}}}})
    vad = config.vad
    assert (vad.threshold, vad.prefix_padding_ms, vad.silence_duration_ms,
            vad.create_response) == (0.6, 200, 300, False)
    config.update({"audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
    # semantic_vad: the turn model decides, with our default waits (eagerness auto)
    assert config.vad is not None and config.vad.semantic == SemanticOptions()
    assert config.vad.silence_duration_ms == SemanticOptions().unsure_silence_ms
    config.update({"audio": {"input": {"turn_detection": {"type": "semantic_vad",
                                                          "eagerness": "high"}}}})
    high = config.vad.semantic
    assert high is not None and high.min_silence_ms < SemanticOptions().min_silence_ms
    assert high.max_silence_ms < SemanticOptions().max_silence_ms
    config.update({"audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
    assert config.vad is not None and config.vad.semantic is None  # silence alone
    config.update({"audio": {"input": {"turn_detection": None}}})
    assert config.vad is None
    as_json = config.as_json("sess", 0)
    json.dumps(as_json)
    assert as_json["audio"]["input"]["turn_detection"] is None


async def test_outbox_bounds_and_backpressure():
    box = Outbox(soft=2, hard=4)
    box.put({"type": "a"})
    box.put({"type": "b"})
    waiter = asyncio.ensure_future(box.wait_room())
    await asyncio.sleep(0)
    assert not waiter.done()  # full to soft: audio waits
    assert json.loads(await box.get())["type"] == "a"
    await asyncio.sleep(0)
    assert waiter.done()
    for kind in "cdef":
        box.put({"type": kind})
    assert box.overflowed and box.closed  # a reader this far behind is cut off


def test_truncate_keeps_the_words_heard():
    clauses = [Clause("You said:", None, True, 1000.0), Clause("one two three four", None,
                                                               True, 1000.0)]
    assert heard_transcript(clauses, 0) == ""
    assert heard_transcript(clauses, 1000) == "You said:"
    assert heard_transcript(clauses, 1500) == "You said: one two"
    assert heard_transcript(clauses, 5000) == "You said: one two three four"
