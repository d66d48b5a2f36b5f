"""Client events in, server events out: parsing, checking and ids (no transport, no state).

A client event is one JSON object with a string ``type`` and an optional ``event_id``. What
cannot be taken -- not JSON, not an object, nested too deep, an unknown type, a field of the
wrong kind, base64 that is not audio, an append over ``MAX_APPEND_BYTES`` -- raises
``ClientError``, which the session answers with an ``error`` server event naming the client's
``event_id`` (OpenAI's ``invalid_request_error`` shape), and goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from typing import Any

#: The most decoded audio one ``input_audio_buffer.append`` may carry: 2 MiB (about 44 s of
#: 24 kHz PCM16). OpenAI documents 15 MiB; a bound this size keeps a session's transient
#: memory small, and real clients append 20-100 ms at a time.
MAX_APPEND_BYTES = 2 * 1024 * 1024
#: The largest text frame the WebSocket accepts (base64 of the largest append, plus JSON).
MAX_MESSAGE_BYTES = MAX_APPEND_BYTES * 4 // 3 + 64 * 1024
MAX_TEXT_CHARS = 32_768  # one text content part, instructions

CLIENT_EVENTS = frozenset({
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
    "input_audio_buffer.clear", "conversation.item.create", "conversation.item.retrieve",
    "conversation.item.delete", "conversation.item.truncate", "response.create",
    "response.cancel", "output_audio_buffer.clear",
})


class ClientError(Exception):
    """A client event the session cannot take (answered by an ``error`` event)."""

    def __init__(self, code: str, message: str, param: str | None = None,
                 event_id: str | None = None, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param
        self.event_id, self.type = event_id, type


def new_id(prefix: str) -> str:
    """``event_…``, ``item_…``, ``resp_…``: OpenAI's shape (a prefix and 22 characters)."""
    return f"{prefix}_{secrets.token_hex(11)}"


def server_event(type: str, **fields: Any) -> dict[str, Any]:
    return {"type": type, "event_id": new_id("event"), **fields}


def error_event(error: ClientError) -> dict[str, Any]:
    return server_event("error", error={
        "type": error.type, "code": error.code, "message": error.message,
        "param": error.param, "event_id": error.event_id})


def parse_client_event(text: str | bytes) -> dict[str, Any]:
    """One WebSocket text frame (or data-channel message) -> the event, checked at its top."""
    try:
        event = json.loads(text)
    except RecursionError:
        raise ClientError("invalid_json", "the event is nested too deeply") from None
    except ValueError as exc:
        raise ClientError("invalid_json", f"the event is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise ClientError("invalid_json", "an event must be a JSON object")
    event_id = event.get("event_id")
    if event_id is not None and not isinstance(event_id, str):
        raise ClientError("invalid_type", "event_id must be a string", "event_id")
    kind = event.get("type")
    if not isinstance(kind, str):
        raise ClientError("missing_required_parameter", "an event needs a string 'type'",
                          "type", event_id)
    if kind not in CLIENT_EVENTS:
        raise ClientError("invalid_event_type", f"unknown or unsupported event type {kind!r}; "
                          f"supported: {', '.join(sorted(CLIENT_EVENTS))}", "type", event_id)
    return event


def checked(event: dict[str, Any], name: str, kind: type | tuple[type, ...], *,
          required: bool = False, default: Any = None) -> Any:
    """``event[name]`` checked to be ``kind`` (``bool`` is never an ``int`` here)."""
    if name not in event or event[name] is None:
        if required:
            raise ClientError("missing_required_parameter", f"missing required parameter "
                              f"{name!r}", name, event.get("event_id"))
        return default
    value = event[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        value = object()  # True is no number
    if not isinstance(value, kinds):
        names = " or ".join(k.__name__ for k in kinds)
        raise ClientError("invalid_type", f"{name!r} must be {names}", name,
                          event.get("event_id"))
    return value


def decode_audio(event: dict[str, Any], name: str = "audio") -> bytes:
    """The base64 audio of ``event[name]``, at most ``MAX_APPEND_BYTES`` once decoded."""
    value = checked(event, name, str, required=True)
    if len(value) > MAX_APPEND_BYTES * 4 // 3 + 4:
        raise ClientError("audio_too_large", f"{name!r} carries more than {MAX_APPEND_BYTES} "
                          "bytes of audio; append it in smaller pieces", name,
                          event.get("event_id"))
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ClientError("invalid_audio", f"{name!r} is not valid base64", name,
                          event.get("event_id")) from None


def encode_audio(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
