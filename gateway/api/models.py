"""The API's request and response bodies as pydantic models: request bodies are validated with
them (``parse``) and the OpenAPI document (api/openapi.py) is generated from them."""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from gateway.api.errors import ApiError


class Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ErrorDetail(Model):
    code: str = Field(description="machine-readable error code")
    message: str = Field(description="what went wrong, for people")


class ErrorBody(Model):
    error: ErrorDetail


class JsonOffer(Model):
    type: Literal["offer"]
    sdp: str = Field(description="the SDP offer")


class JsonAnswer(Model):
    id: str
    type: Literal["answer"]
    sdp: str
    location: str


class SpeechCreate(Model):
    text: str = Field(min_length=1, description="what to say (1..--max-text-chars)")
    interrupt: StrictBool = Field(False, description="cut what plays now instead of queueing")
    voice: str | None = Field(None, description="a voice from /v1/voices (default: the first)")
    open: StrictBool = Field(False, description="more text follows: append it with POST "
                             ".../speech/{utterance_id}/text until end")


class SpeechAppend(Model):
    text: str = Field("", description="more of an open utterance's text (any size)")
    flush: StrictBool = Field(False, description="speak what is buffered now")
    end: StrictBool = Field(False, description="the text is complete")


class SpeechAppended(Model):
    id: str
    state: str
    chars: int
    ended: bool


class SpeechAccepted(Model):
    id: str
    state: str
    voice: str
    location: str


class Interrupted(Model):
    interrupted: int


class UtteranceState(Model):
    model_config = ConfigDict(extra="allow")
    id: str
    voice: str
    state: Literal["queued", "synthesizing", "playing", "done", "interrupted", "failed"]
    error: str | None
    first_seq: int | None
    last_seq: int | None
    first_timestamp: int | None
    latency_ms: dict[str, float | None]


class SessionState(Model):
    model_config = ConfigDict(extra="allow")
    id: str
    connection_state: str
    utterances: dict[str, Any]


class FrameStreamRequest(Model):
    text: str = Field(min_length=1)
    voice: str | None = None
    pace: Literal["asap", "live"] = "asap"
    words: StrictBool = Field(False, description="word records too (when each word plays)")


class Voices(Model):
    default: str
    voices: list[str]


class Health(Model):
    model_config = ConfigDict(extra="allow")
    status: Literal["ok", "draining"]
    version: str
    sessions: int


class CacheStats(Model):
    model_config = ConfigDict(extra="allow")


#: request field -> the error code its validation failure answers with
_FIELD_CODES = {
    "text": ("empty_text", "text must be a non-empty string"),
    "interrupt": ("invalid_interrupt", "interrupt must be true or false"),
    "voice": ("invalid_voice", "voice must be a string"),
    "pace": ("invalid_pace", "pace must be 'asap' or 'live'"),
    "type": ("not_an_offer", "type must be 'offer'"),
    "sdp": ("invalid_sdp", "sdp must be a string holding the offer"),
}


M = TypeVar("M", bound=Model)


def parse(model: type[M], body: Any) -> M:
    """Validate a decoded JSON body; the first failing field becomes a 400 with its code."""
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        code, message = _FIELD_CODES.get(field, ("invalid_request", first["msg"]))
        raise ApiError(400, code, message) from None
