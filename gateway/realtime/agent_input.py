"""What a Realtime response asks the agent: the conversation's items as chat messages."""

from __future__ import annotations

from gateway.agent.base import Message
from gateway.realtime.items import Item

HISTORY_MESSAGES = 40


def agent_input(context: list[Item], instructions: str,
                own: Item | None) -> tuple[str, list[Message]]:
    """The agent's input: the last user message's text, and the messages before it (the
    instructions first) as its history."""
    messages: list[Message] = []
    for item in context:
        if item is own:
            continue
        text = item.text
        if not text:
            continue
        role = item.role if item.type == "message" and item.role else "user"
        messages.append(Message(role, text))  # type: ignore[arg-type]
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    text = "" if last_user is None else messages[last_user].content
    history = messages[:last_user] if last_user is not None else messages
    history = history[-HISTORY_MESSAGES:]
    if instructions:
        history = [Message("system", instructions), *history]
    return text, history
