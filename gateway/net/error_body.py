"""One line out of an upstream's HTTP error body, for the error we raise and log: OpenAI's
``{"error": {"message"}}``, vLLM's ``{"object": "error", "message"}``, FastAPI's
``{"detail"}`` (a string, or validation errors as JSON), or the text itself (an HTML 502 page
from a proxy), at most 300 characters."""

from __future__ import annotations

import json

LIMIT = 300


def error_message(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:LIMIT] or "(empty body)"
    if isinstance(data, dict):
        if data.get("object") == "error" and "message" in data:
            return str(data["message"])[:LIMIT]
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:LIMIT]
        if error is not None:
            return str(error)[:LIMIT]
        detail = data.get("detail")
        if isinstance(detail, str):
            return detail[:LIMIT]
        if detail is not None:
            return json.dumps(detail)[:LIMIT]
    return text[:LIMIT]
