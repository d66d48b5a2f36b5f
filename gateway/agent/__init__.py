"""The reply step of full duplex: agents that turn the user's words into a streamed answer.

``base`` (the ``Agent`` interface, ``Message``, the bounded per-conversation ``History``,
``AgentError``), ``echo`` ("You said: ..."), ``openai_chat`` (any OpenAI-compatible streaming
chat-completions server; ``sse`` parses its events), ``hook`` (an embedder's Python async
generator), ``registry`` (specs: ``echo``, ``openai+http://...``, ``python:module:function``)
and ``clauses`` (streamed text cut into speakable clauses as soon as each is complete).

Layer: beside gateway.listen, under the session. May import only gateway.media, gateway.rtp,
gateway.runtime, gateway.tts (for clauses) and libraries.
"""

from gateway.agent.base import Agent, AgentError, History, Message

__all__ = ["Agent", "AgentError", "History", "Message"]
