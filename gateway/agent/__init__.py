"""The reply step of full duplex: agents that turn the user's words into a streamed answer.

``base`` (the ``Agent`` interface, ``Message``, the bounded per-conversation ``History``,
``AgentError``), ``echo`` ("You said: ..."), ``openai_chat`` (any OpenAI-compatible streaming
chat-completions server; ``sse`` parses its events), ``hook`` (an embedder's Python async
generator) and ``registry`` (specs: ``echo``, ``openai+http://...``, ``python:module:function``).
The streamed text is cut into clauses by ``gateway.text`` (the one segmenter).

Layer: beside gateway.listen, under the session. May import only gateway.media, gateway.rtp,
gateway.runtime, gateway.text and libraries.
"""

from gateway.agent.base import Agent, AgentError, History, Message

__all__ = ["Agent", "AgentError", "History", "Message"]
