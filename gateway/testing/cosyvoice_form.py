"""What the stand-in CosyVoice FastAPI server does with a request body: parse the HTML form
(urlencoded or multipart, whatever the method) and validate it the way FastAPI does."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

#: Each FastAPI endpoint's parameters, in declaration order: (name, "form" | "file").
ENDPOINTS: dict[str, tuple[tuple[str, str], ...]] = {
    "sft": (("tts_text", "form"), ("spk_id", "form")),
    "zero_shot": (("tts_text", "form"), ("prompt_text", "form"), ("prompt_wav", "file")),
    "cross_lingual": (("tts_text", "form"), ("prompt_wav", "file")),
    "instruct": (("tts_text", "form"), ("spk_id", "form"), ("instruct_text", "form")),
    "instruct2": (("tts_text", "form"), ("instruct_text", "form"), ("prompt_wav", "file")),
}
_PARAM = re.compile(r';\s*([\w*-]+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class FormPart:
    """One multipart part: its name, filename (None for a plain field), headers and bytes."""

    name: str
    filename: str | None
    headers: dict[str, str]
    data: bytes


def parse_multipart(body: bytes, boundary: str) -> list[FormPart]:
    """Split a multipart/form-data body. Raises ValueError when it is malformed."""
    delim = b"--" + boundary.encode("latin-1")
    if not body.startswith(delim):
        body = body[body.index(b"\r\n" + delim) + 2:]
    parts: list[FormPart] = []
    for segment in body[len(delim):].split(b"\r\n" + delim):
        if segment.startswith(b"--"):
            return parts
        if not segment.startswith(b"\r\n"):
            raise ValueError("multipart delimiter not followed by CRLF")
        head, sep, data = segment[2:].partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("multipart part without a header/body separator")
        headers: dict[str, str] = {}
        for line in head.decode("utf-8").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        params = dict(_PARAM.findall(headers.get("content-disposition", "")))
        if "name" not in params:
            raise ValueError("multipart part without a name")
        parts.append(FormPart(params["name"], params.get("filename"), headers, data))
    raise ValueError("multipart body without a closing delimiter")


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, FormPart]]:
    """(fields, files) as Starlette sees them (last value wins). Other content types: empty."""
    mime = content_type.split(";")[0].strip().lower()
    if mime == "application/x-www-form-urlencoded":
        return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True,
                              encoding="utf-8")), {}
    if mime != "multipart/form-data":
        return {}, {}
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    if match is None:
        raise ValueError("multipart without a boundary")
    fields: dict[str, str] = {}
    files: dict[str, FormPart] = {}
    for part in parse_multipart(body, match.group(1)):
        if part.filename is None:
            fields[part.name] = part.data.decode("utf-8")
        else:
            files[part.name] = part
    return fields, files


def validation_errors(mode: str, fields: dict[str, str],
                      files: dict[str, FormPart]) -> list[dict[str, Any]]:
    """FastAPI's 422 ``detail`` items for this endpoint ([] when the request is valid)."""
    errors: list[dict[str, Any]] = []
    for name, kind in ENDPOINTS[mode]:
        value = fields.get(name)
        if kind == "form" and value:
            continue
        if kind == "file" and name in files:
            continue
        if kind == "file" and value:
            errors.append({"type": "value_error", "loc": ["body", name],
                           "msg": f"Value error, Expected UploadFile, received: {type(value)}",
                           "input": value, "ctx": {"error": {}}})
            continue
        errors.append({"type": "missing", "loc": ["body", name], "msg": "Field required",
                       "input": None})
    return errors
