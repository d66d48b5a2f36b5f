"""Logging: text for people, or one JSON object per line (``--log-format json``) for a log
pipeline, carrying the session and utterance a line is about.

The ids travel in context variables (``bind``): a request handler binds its session, and the
tasks it starts (the speaker, an utterance's synthesis) inherit them, so a line logged anywhere
down the media path names its session without every call passing it. ``extra={"session": …}``
on a log call works too.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from typing import Any

SESSION: contextvars.ContextVar[str | None] = contextvars.ContextVar("session", default=None)
UTTERANCE: contextvars.ContextVar[str | None] = contextvars.ContextVar("utterance", default=None)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def bind(session: str | None = None, utterance: str | None = None) -> None:
    """Name the session (and utterance) of what this task and its children log."""
    if session is not None:
        SESSION.set(session)
    if utterance is not None:
        UTTERANCE.set(utterance)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        session = getattr(record, "session", None) or SESSION.get()
        utterance = getattr(record, "utterance", None) or UTTERANCE.get()
        if session:
            out["session"] = session
        if utterance:
            out["utterance"] = utterance
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
