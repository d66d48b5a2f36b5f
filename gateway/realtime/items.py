"""A Realtime conversation's items (messages, function calls and their outputs), bounded.

Items are kept in conversation order (``previous_item_id`` inserts after an item, ``"root"``
at the start). At most ``MAX_ITEMS`` are kept: the oldest go first, as the context a model
sees is truncated. ``Item.text`` is what the agent reads: the text, the input audio's
transcript, the assistant's transcript (as far as it was heard, after a truncate).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gateway.realtime.protocol import ClientError, new_id

MAX_ITEMS = 512
ROLES = ("user", "assistant", "system")
CONTENT_TYPES = {
    "user": ("input_text", "input_audio"),
    "system": ("input_text",),
    "assistant": ("output_text", "output_audio", "text", "audio"),
}


@dataclass(eq=False)
class Item:
    id: str
    type: str  # message | function_call | function_call_output
    role: str | None = None
    content: list[dict[str, Any]] = field(default_factory=list)
    status: str = "completed"
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    #: an input audio item's transcription (set once it is known, "" if it failed)
    transcribed: asyncio.Future[str] | None = None
    audio_ms: float = 0.0  # an assistant item's audio sent so far
    heard: str = ""  # an input audio item's transcription, even with transcription off
    clauses: list[Any] = field(default_factory=list)  # an assistant item's spoken clauses

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": "realtime.item", "type": self.type,
                               "status": self.status}
        if self.type == "message":
            out["role"] = self.role
            out["content"] = [{k: v for k, v in part.items() if k != "audio"}
                              for part in self.content]
        elif self.type == "function_call":
            out.update(call_id=self.call_id, name=self.name, arguments=self.arguments or "")
        else:
            out.update(call_id=self.call_id, output=self.output or "")
        return out

    @property
    def text(self) -> str:
        if self.type == "function_call":
            return f"[called {self.name}({self.arguments or ''})]"
        if self.type == "function_call_output":
            return f"[{self.call_id} returned: {self.output or ''}]"
        pieces = [part.get("text") or part.get("transcript") or "" for part in self.content]
        return " ".join(p for p in pieces if p).strip() or self.heard


def item_from_client(raw: Any, event_id: str | None) -> Item:
    """A ``conversation.item.create`` item, checked (its audio is decoded by the caller)."""
    def bad(message: str, param: str = "item") -> ClientError:
        return ClientError("invalid_value", message, param, event_id)

    if not isinstance(raw, dict):
        raise bad("item must be an object")
    kind = raw.get("type", "message")
    item_id = raw.get("id") or new_id("item")
    if not isinstance(item_id, str) or len(item_id) > 64:
        raise bad("item.id must be a string of at most 64 characters", "item.id")
    if kind == "message":
        role = raw.get("role")
        if role not in ROLES:
            raise bad(f"item.role must be one of {', '.join(ROLES)}", "item.role")
        content = raw.get("content")
        if not isinstance(content, list) or not content or len(content) > 16:
            raise bad("item.content must be a list of 1-16 content parts", "item.content")
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in CONTENT_TYPES[role]:
                raise bad(f"a {role} message takes content of type "
                          f"{', '.join(CONTENT_TYPES[role])}", "item.content")
            for key in ("text", "transcript", "audio"):
                if part.get(key) is not None and not isinstance(part[key], str):
                    raise bad(f"content.{key} must be a string", f"item.content.{key}")
            parts.append({k: part[k] for k in ("type", "text", "transcript", "audio")
                          if k in part})
        return Item(item_id, "message", role, parts)
    if kind == "function_call":
        name, arguments = raw.get("name"), raw.get("arguments", "")
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise bad("a function_call needs a string name and arguments")
        return Item(item_id, kind, call_id=str(raw.get("call_id") or new_id("call")),
                    name=name, arguments=arguments)
    if kind == "function_call_output":
        call_id, output = raw.get("call_id"), raw.get("output")
        if not isinstance(call_id, str) or not isinstance(output, str):
            raise bad("a function_call_output needs a string call_id and output")
        return Item(item_id, kind, call_id=call_id, output=output)
    raise bad(f"unsupported item type {kind!r}", "item.type")


class Items:
    def __init__(self, max_items: int = MAX_ITEMS) -> None:
        self.max_items = max_items
        self._items: OrderedDict[str, Item] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):  # noqa: ANN204 - an iterator of Item
        return iter(list(self._items.values()))

    def get(self, item_id: str) -> Item | None:
        return self._items.get(item_id)

    @property
    def last_id(self) -> str | None:
        return next(reversed(self._items), None)

    def add(self, item: Item, previous_item_id: str | None = None,
            event_id: str | None = None) -> str | None:
        """Insert ``item`` (at the end, after ``previous_item_id``, or first for "root");
        returns the id of the item before it."""
        if item.id in self._items:
            raise ClientError("duplicate_item_id", f"an item {item.id!r} already exists",
                              "item.id", event_id)
        if previous_item_id is None:
            before = self.last_id
            self._items[item.id] = item
        elif previous_item_id == "root" or previous_item_id in self._items:
            ordered = list(self._items.items())
            at = 0 if previous_item_id == "root" else \
                next(i for i, (k, _) in enumerate(ordered) if k == previous_item_id) + 1
            ordered.insert(at, (item.id, item))
            self._items = OrderedDict(ordered)
            before = None if previous_item_id == "root" else previous_item_id
        else:
            raise ClientError("item_not_found", f"no item {previous_item_id!r} in the "
                              "conversation", "previous_item_id", event_id)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)
        return before

    def delete(self, item_id: str) -> Item | None:
        return self._items.pop(item_id, None)
