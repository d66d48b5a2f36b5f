import base64
import json

import pytest

from gateway.http.openai_speech import (
    FILE_EXTENSIONS,
    MEDIA_TYPES,
    OPENAI_VOICES,
    RESPONSE_FORMATS,
    SpeechRequest,
    SpeechRequestError,
    parse_speech_request,
    sse_audio_delta,
    sse_audio_done,
)

VOICES = ("piper", "tone")


def parse(data, **kwargs):
    kwargs = {"voices": VOICES, "default_voice": "piper", "max_chars": 100, **kwargs}
    return parse_speech_request(data, **kwargs)


def error(data, **kwargs) -> SpeechRequestError:
    with pytest.raises(SpeechRequestError) as err:
        parse(data, **kwargs)
    return err.value


def test_defaults():
    request = parse({"input": "Hello."})
    assert request == SpeechRequest(
        model="",
        input="Hello.",
        voice="piper",
        response_format="mp3",
        speed=1.0,
        instructions=None,
        stream_format="audio",
        pace="asap",
    )
    assert request.media_type == "audio/mpeg" and request.file_extension == "mp3"


def test_a_full_json_body_as_bytes():
    body = json.dumps(
        {
            "model": "gpt-4o-mini-tts",
            "input": "Hi there",
            "voice": "tone",
            "response_format": "opus",
            "speed": 1.5,
            "instructions": "Speak warmly.",
            "stream_format": "sse",
            "pace": "live",
        }
    ).encode()
    request = parse(body)
    assert (request.model, request.input, request.voice) == ("gpt-4o-mini-tts", "Hi there", "tone")
    assert (request.response_format, request.speed, request.instructions) == (
        "opus",
        1.5,
        "Speak warmly.",
    )
    assert (request.stream_format, request.pace) == ("sse", "live")
    assert request.media_type == "text/event-stream" and request.file_extension == "opus"


def test_query_strings_convert():
    request = parse({"input": "Hi", "voice": "alloy", "speed": "0.5", "response_format": "wav"})
    assert request.speed == 0.5 and request.voice == "piper" and request.response_format == "wav"


@pytest.mark.parametrize("model", ["tts-1", "", "anything at all", 42, None, {"x": 1}, ["a"]])
def test_model_is_never_an_error(model):
    assert isinstance(parse({"input": "Hi", "model": model}).model, str)
    assert parse({"input": "Hi"}).model == ""


def test_input_is_required():
    err = error({"voice": "tone"})
    assert (err.code, err.param, err.message) == ("missing_input", "input", "input is required")


@pytest.mark.parametrize("value", ["", "   \n", 7, None, ["Hi"]])
def test_input_must_be_a_non_empty_string(value):
    assert error({"input": value}).code == "invalid_input"


def test_input_length_limit_is_passed_in():
    assert parse({"input": "x" * 100}).input == "x" * 100
    err = error({"input": "x" * 101})
    assert err.code == "input_too_long" and "101" in err.message and "100" in err.message
    assert parse({"input": "x" * 101}, max_chars=4096).input == "x" * 101
    assert parse({"input": "é" * 100}).input == "é" * 100  # characters, not bytes


@pytest.mark.parametrize("voice", ["piper", "tone", {"id": "tone"}])
def test_gateway_voices_by_name_or_id(voice):
    name = voice["id"] if isinstance(voice, dict) else voice
    assert parse({"input": "Hi", "voice": voice}).voice == name


@pytest.mark.parametrize("voice", [*OPENAI_VOICES, "Alloy", "NOVA", {"id": "cedar"}])
def test_openai_voices_map_to_the_default(voice):
    assert parse({"input": "Hi", "voice": voice}, default_voice="tone").voice == "tone"


def test_openai_builtin_names_are_the_thirteen():
    assert set(OPENAI_VOICES) == {
        "alloy",
        "ash",
        "ballad",
        "coral",
        "echo",
        "fable",
        "nova",
        "onyx",
        "sage",
        "shimmer",
        "verse",
        "marin",
        "cedar",
    }


def test_absent_voice_is_the_default():
    assert parse({"input": "Hi"}, default_voice="tone").voice == "tone"
    assert parse({"input": "Hi", "voice": None}).voice == "piper"


def test_unknown_voice_names_the_known_ones():
    err = error({"input": "Hi", "voice": "bob"})
    assert (err.code, err.param) == ("unknown_voice", "voice")
    assert "'bob'" in err.message
    assert all(name in err.message for name in [*VOICES, *OPENAI_VOICES])
    assert error({"input": "Hi", "voice": {"id": "bob"}}).code == "unknown_voice"


@pytest.mark.parametrize("voice", [3, ["tone"], {"name": "tone"}, {"id": 3}, True])
def test_voice_of_the_wrong_shape(voice):
    assert error({"input": "Hi", "voice": voice}).code == "invalid_voice"


@pytest.mark.parametrize("fmt", RESPONSE_FORMATS)
def test_every_response_format(fmt):
    assert parse({"input": "Hi", "response_format": fmt}).response_format == fmt


@pytest.mark.parametrize("fmt", ["ogg", "MP3", "", 3, None])
def test_unknown_response_format(fmt):
    err = error({"input": "Hi", "response_format": fmt})
    assert err.code == "invalid_response_format"
    assert all(name in err.message for name in RESPONSE_FORMATS)


def test_response_format_this_build_cannot_encode():
    supported = {"opus", "pcm", "wav"}
    assert parse({"input": "Hi", "response_format": "wav"}, supported_formats=supported)
    err = error({"input": "Hi"}, supported_formats=supported)  # the default mp3
    assert err.code == "unsupported_response_format" and err.param == "response_format"
    assert "opus, pcm, wav" in err.message and "mp3" in err.message


@pytest.mark.parametrize("speed", [0.25, 1, 2.5, 4.0, "3"])
def test_speed_in_range(speed):
    assert parse({"input": "Hi", "speed": speed}).speed == float(speed)


@pytest.mark.parametrize("speed", [0.2, 4.01, 0, -1, "fast", None, True, float("nan"), "inf"])
def test_speed_out_of_range_or_not_a_number(speed):
    err = error({"input": "Hi", "speed": speed})
    assert (err.code, err.param) == ("invalid_speed", "speed")
    assert "0.25" in err.message and "4.0" in err.message


def test_instructions_optional_string():
    assert parse({"input": "Hi", "instructions": "whisper"}).instructions == "whisper"
    assert error({"input": "Hi", "instructions": 5}).code == "invalid_instructions"


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("stream_format", ["audio", "sse"], ["SSE", "chunked", 1]),
        ("pace", ["asap", "live"], ["realtime", "", 0]),
    ],
)
def test_stream_format_and_pace(field, good, bad):
    for value in good:
        assert getattr(parse({"input": "Hi", field: value}), field) == value
    for value in bad:
        assert error({"input": "Hi", field: value}).code == f"invalid_{field}"


def test_unknown_fields_are_ignored():
    assert parse({"input": "Hi", "future_field": {"x": 1}}).input == "Hi"


@pytest.mark.parametrize("body", [b"{", b"", "nope", b"\xff\xfe", b"[" * 100_000])
def test_body_that_is_not_json(body):
    assert error(body).code == "invalid_json"


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"3", b"null", [1]])
def test_body_that_is_not_an_object(body):
    assert error(body).code == "invalid_request"


def test_first_failing_field_is_reported():
    assert error({"voice": "bob"}).code == "missing_input"
    assert error({"input": "Hi", "voice": "bob", "speed": 9}).code == "unknown_voice"


def test_error_body_is_openai_shaped():
    err = error({"input": "Hi", "speed": 9})
    assert err.error_body() == {
        "error": {
            "code": "invalid_speed",
            "message": err.message,
            "param": "speed",
            "type": "invalid_request_error",
        }
    }
    assert isinstance(err, ValueError) and str(err) == err.message


def test_default_voice_must_be_a_gateway_voice():
    with pytest.raises(ValueError):
        parse({"input": "Hi"}, default_voice="alloy")


def test_media_types_and_extensions():
    assert MEDIA_TYPES == {
        "opus": "audio/ogg",
        "pcm": "audio/pcm",
        "wav": "audio/wav",
        "mp3": "audio/mpeg",
        "flac": "audio/flac",
        "aac": "audio/aac",
    }
    assert FILE_EXTENSIONS == {fmt: fmt for fmt in RESPONSE_FORMATS}


def test_sse_delta_event():
    event = sse_audio_delta(b"\x00\x01\xfe\xff")
    assert event == b'data: {"type":"speech.audio.delta","audio":"AAH+/w=="}\n\n'
    payload = json.loads(event[len(b"data: ") :])
    assert base64.b64decode(payload["audio"]) == b"\x00\x01\xfe\xff"


def test_sse_done_event_with_usage():
    assert sse_audio_done(12, 340) == (
        b'data: {"type":"speech.audio.done","usage":'
        b'{"input_tokens":12,"output_tokens":340,"total_tokens":352}}\n\n'
    )
