"""parse_speech_request (stream/openai_speech.py): only SpeechRequestError, on any JSON body."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from gateway.http.openai_speech import (
    MAX_SPEED,
    MIN_SPEED,
    RESPONSE_FORMATS,
    SpeechRequest,
    SpeechRequestError,
    parse_speech_request,
)
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import MAX_CHARS, VOICES, automatic_gc_off, note_event, speech_body

pytestmark = FUZZ_MARKS

formats = st.one_of(st.none(), st.sets(st.sampled_from(RESPONSE_FORMATS)))


@fuzz_settings()
@given(speech_body, formats)
@example(b"[" * 100_000, None)
@example(b'{"input": "hi", "speed": ' + b"9" * 5000 + b"}", None)
@example({"input": "hi", "model": 10**5000}, None)
@example({"input": "hi", "speed": 10**400}, None)
@example({"input": "hi", "voice": {"id": ["x"]}}, None)
@example('{"input": "\\ud800"}', None)
def test_parse_speech_request_raises_only_speech_request_error(data, supported):
    try:
        with automatic_gc_off():
            request = parse_speech_request(
                data, voices=VOICES, default_voice="tone", max_chars=MAX_CHARS,
                supported_formats=supported,
            )
    except SpeechRequestError as exc:
        note_event(f"error {exc.code}")
        assert isinstance(exc.code, str) and exc.code
        assert isinstance(exc.message, str) and exc.message
        assert exc.param is None or isinstance(exc.param, str)
        error = exc.error_body()["error"]
        assert error["code"] == exc.code and error["type"] == "invalid_request_error"
        return
    note_event("accepted")
    assert isinstance(request, SpeechRequest)
    assert isinstance(request.input, str) and request.input.strip()
    assert len(request.input) <= MAX_CHARS
    assert request.voice in VOICES
    assert request.response_format in RESPONSE_FORMATS
    assert supported is None or request.response_format in supported
    assert math.isfinite(request.speed) and MIN_SPEED <= request.speed <= MAX_SPEED
    assert request.stream_format in ("audio", "sse") and request.pace in ("asap", "live")
    assert isinstance(request.model, str)
    assert request.instructions is None or isinstance(request.instructions, str)
    assert request.media_type  # every accepted format has a media type
