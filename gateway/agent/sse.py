"""Server-sent events, parsed from lines (the text/event-stream rules that chat servers use).

Fields ``data`` (one optional space after the colon dropped; several data lines of one event
joined with newlines) and ``event``; lines starting with ``:`` are comments; a blank line ends
an event. ``id`` and ``retry`` are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    data: str
    event: str = "message"


class SseParser:
    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""

    def feed_line(self, raw: bytes | str) -> Event | None:
        """One line (its end of line optional); the event it completes, if any."""
        line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None

    def finish(self) -> Event | None:
        """The event left open when the stream ended without a blank line (servers do that)."""
        return self._dispatch()

    def _dispatch(self) -> Event | None:
        if not self._data:
            self._event = ""
            return None
        event = Event("\n".join(self._data), self._event or "message")
        self._data, self._event = [], ""
        return event
