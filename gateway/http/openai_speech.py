"""OpenAI's ``audio.speech`` contract: the validated request, media types, SSE events.

``parse_speech_request(data, voices=..., default_voice=..., max_chars=...)`` takes the JSON
body (bytes, str or an already decoded mapping) or the GET query as a mapping of strings, and
returns a ``SpeechRequest`` or raises ``SpeechRequestError`` (code + human message; the API
answers 400 with ``error_body()``). The rules:

- ``model``: anything, never an error (kept as a string, "" when absent);
- ``input``: required, a string of 1..max_chars characters, not only whitespace;
- ``voice``: a name or ``{"id": name}``; one of the gateway's voices, else one of OpenAI's
  built-in names (``OPENAI_VOICES``, any case), which all mean the default voice; absent ->
  the default voice; unknown -> ``unknown_voice`` naming the known ones;
- ``response_format``: opus|pcm|wav|mp3|flac|aac, default mp3; one this build cannot encode
  (``supported_formats``, when given) -> ``unsupported_response_format`` naming those it can;
- ``speed``: a number 0.25..4.0, default 1.0; ``instructions``: an optional string;
- ``stream_format``: audio|sse, default audio; ``pace`` (our extension): asap|live, default
  asap. Unknown fields are ignored, as OpenAI adds fields over time.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from gateway.http.speakable import unspeakable

ResponseFormat = Literal["opus", "pcm", "wav", "mp3", "flac", "aac"]
RESPONSE_FORMATS: tuple[str, ...] = ("opus", "pcm", "wav", "mp3", "flac", "aac")
MEDIA_TYPES = {
    "opus": "audio/ogg",
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "aac": "audio/aac",
}
FILE_EXTENSIONS = {fmt: fmt for fmt in RESPONSE_FORMATS}  # speech.opus, speech.mp3, ...
SSE_MEDIA_TYPE = "text/event-stream"
OPENAI_VOICES = tuple(
    "alloy ash ballad coral echo fable nova onyx sage shimmer verse marin cedar".split()
)
MIN_SPEED, MAX_SPEED = 0.25, 4.0

# What a field's failure is called when no validator below named it.
_FIELD_ERRORS = {
    "input": ("invalid_input", "input must be a string"),
    "voice": ("invalid_voice", 'voice must be a voice name or {"id": "<voice name>"}'),
    "response_format": (
        "invalid_response_format",
        f"response_format must be one of {', '.join(RESPONSE_FORMATS)}",
    ),
    "speed": ("invalid_speed", f"speed must be a number from {MIN_SPEED} to {MAX_SPEED}"),
    "instructions": ("invalid_instructions", "instructions must be a string"),
    "stream_format": ("invalid_stream_format", "stream_format must be audio or sse"),
    "pace": ("invalid_pace", "pace must be asap or live"),
}
_CUSTOM_CODES = frozenset(
    {"invalid_input", "input_too_long", "invalid_voice", "unknown_voice", "invalid_speed"}
)


class SpeechRequestError(ValueError):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param

    def error_body(self) -> dict[str, Any]:
        """The 400 response body, in OpenAI's error shape."""
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "param": self.param,
                "type": "invalid_request_error",
            }
        }


class SpeechRequest(BaseModel):
    """A valid request; ``voice`` is already the gateway voice to speak with.

    Built through ``parse_speech_request`` (which passes the voices and the input limit as
    validation context); constructed directly, voice and input length are taken as given.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str = ""
    input: str
    voice: str = ""
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED, allow_inf_nan=False)
    instructions: str | None = None
    stream_format: Literal["audio", "sse"] = "audio"
    pace: Literal["asap", "live"] = "asap"

    @property
    def media_type(self) -> str:
        """The response's Content-Type: the format's, or SSE's for ``stream_format=sse``."""
        return SSE_MEDIA_TYPE if self.stream_format == "sse" else MEDIA_TYPES[self.response_format]

    @property
    def file_extension(self) -> str:
        return FILE_EXTENSIONS[self.response_format]

    @field_validator("model", mode="before")
    @classmethod
    def _any_model(cls, value: Any) -> str:
        return "" if value is None else value if isinstance(value, str) else json.dumps(value)

    @field_validator("input", mode="before")
    @classmethod
    def _input(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # the str type check names it
        if not value.strip():
            raise PydanticCustomError("invalid_input", "input must not be empty")
        if (reason := unspeakable(value)) is not None:
            raise PydanticCustomError("invalid_input", reason)
        max_chars = _context(info).get("max_chars")
        if max_chars is not None and len(value) > max_chars:
            raise PydanticCustomError(
                "input_too_long",
                "input is {length} characters; at most {max_chars} are allowed",
                {"length": len(value), "max_chars": max_chars},
            )
        return value

    @field_validator("voice", mode="before")
    @classmethod
    def _voice(cls, value: Any, info: ValidationInfo) -> str:
        ctx = _context(info)
        if isinstance(value, Mapping) and isinstance(value.get("id"), str):
            value = value["id"]
        if not isinstance(value, str):
            raise PydanticCustomError("invalid_voice", _FIELD_ERRORS["voice"][1])
        if not ctx or value in ctx["voices"]:
            return value
        if value.lower() in OPENAI_VOICES:
            return ctx["default_voice"]
        known = ", ".join([*sorted(ctx["voices"]), *OPENAI_VOICES])
        raise PydanticCustomError(
            "unknown_voice",
            "unknown voice '{voice}'; known voices: {known}",
            {"voice": value, "known": known},
        )

    @field_validator("speed", mode="before")
    @classmethod
    def _speed_is_a_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticCustomError("invalid_speed", _FIELD_ERRORS["speed"][1])
        return value


def parse_speech_request(
    data: bytes | str | Mapping[str, Any],
    *,
    voices: Collection[str],
    default_voice: str,
    max_chars: int,
    supported_formats: Collection[str] | None = None,
) -> SpeechRequest:
    """Validate a JSON body (bytes/str/decoded) or a query mapping into a ``SpeechRequest``."""
    if default_voice not in voices:
        raise ValueError(f"default voice {default_voice!r} is not among {sorted(voices)}")
    if isinstance(data, bytes | str):
        try:
            data = json.loads(data)
        except (ValueError, RecursionError):
            raise SpeechRequestError("invalid_json", "the request body is not valid JSON") from None
    if not isinstance(data, Mapping):
        raise SpeechRequestError("invalid_request", "the request body must be a JSON object")
    fields = dict(data)
    if fields.get("voice") is None:
        fields["voice"] = default_voice
    context = {"voices": frozenset(voices), "default_voice": default_voice, "max_chars": max_chars}
    try:
        request = SpeechRequest.model_validate(fields, context=context)
    except ValidationError as exc:
        raise _speech_error(exc) from None
    if supported_formats is not None and request.response_format not in supported_formats:
        usable = [fmt for fmt in RESPONSE_FORMATS if fmt in supported_formats]
        raise SpeechRequestError(
            "unsupported_response_format",
            f"response_format {request.response_format} is not available on this server; "
            f"use one of {', '.join(usable)}",
            "response_format",
        )
    return request


def sse_audio_delta(audio: bytes) -> bytes:
    """``data: {"type":"speech.audio.delta","audio":"<base64>"}`` and a blank line."""
    return _sse({"type": "speech.audio.delta", "audio": base64.b64encode(audio).decode()})


def sse_audio_done(input_tokens: int, output_tokens: int) -> bytes:
    """The final event, with the usage counts."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
    }
    return _sse({"type": "speech.audio.done", "usage": usage})


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


def _context(info: ValidationInfo) -> dict[str, Any]:
    return info.context if isinstance(info.context, dict) else {}


def _speech_error(exc: ValidationError) -> SpeechRequestError:
    error = exc.errors(include_url=False)[0]
    field = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "missing":
        return SpeechRequestError(f"missing_{field}", f"{field} is required", field)
    if error["type"] in _CUSTOM_CODES:
        return SpeechRequestError(error["type"], error["msg"], field)
    code, message = _FIELD_ERRORS.get(field, ("invalid_request", error["msg"]))
    return SpeechRequestError(code, message, field or None)
