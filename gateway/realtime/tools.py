"""Function calling through an OpenAI-compatible chat backend (``--agent openai+http://…``):
the session's Realtime tools and items, as the chat API takes them.

Realtime ``{"type": "function", "name", "description", "parameters"}`` is chat's ``{"type":
"function", "function": {...}}``; a ``function_call`` item is an assistant message with
``tool_calls``, a ``function_call_output`` a ``tool`` message. Agents without
``reply_with_tools`` (echo, hooks) answer as if no tools were given.
"""

from __future__ import annotations

from typing import Any

from gateway.realtime.items import Item

MAX_MESSAGES = 40


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" \
                or not isinstance(tool.get("name"), str):
            continue  # MCP tools and the like: not served
        function = {"name": tool["name"]}
        for key in ("description", "parameters"):
            if key in tool:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice if choice in ("auto", "none", "required") else None


def chat_messages(context: list[Item], instructions: str, own: set[str]) -> list[dict[str, Any]]:
    """The conversation as chat messages (the last ``MAX_MESSAGES``), instructions first."""
    messages: list[dict[str, Any]] = []
    for item in context:
        if item.id in own:
            continue
        if item.type == "function_call":
            messages.append({"role": "assistant", "content": None, "tool_calls": [{
                "id": item.call_id, "type": "function",
                "function": {"name": item.name, "arguments": item.arguments or "{}"}}]})
        elif item.type == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.call_id,
                             "content": item.output or ""})
        elif item.text:
            messages.append({"role": item.role or "user", "content": item.text})
    messages = messages[-MAX_MESSAGES:]
    while messages and messages[0]["role"] == "tool":  # its call was cut off
        messages.pop(0)
    if instructions:
        messages.insert(0, {"role": "system", "content": instructions})
    return messages
