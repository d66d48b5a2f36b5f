"""A Realtime response and what it is made of: the clauses it says (each an utterance of the
session's speaker), its output items, and what a truncate keeps of its transcript. Also
``Hearing``: the gateway's recogniser and agent, as a Realtime session uses them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.agent.base import Agent
from gateway.listen.asr import Recognizer
from gateway.realtime.audio_formats import OutputEncoder
from gateway.realtime.items import Item
from gateway.realtime.prepared import PreparedReply
from gateway.speech.utterance import Utterance
from gateway.tts.base import Synthesizer


@dataclass
class Hearing:
    """What the gateway hears and answers with (``DuplexFactory``'s, shared by sessions)."""

    recognizer: Recognizer
    agent: Agent
    vad: str = "silero"
    barge_in_ms: int = 300
    speculate_ms: int | None = 100
    turn_silence_ms: int = 500


@dataclass(eq=False)
class Clause:
    text: str
    utterance: Utterance
    sent: bool = False  # its transcript delta went out (with its first audio)
    audio_ms: float = 0.0


@dataclass(eq=False)
class Response:
    id: str
    item: Item
    modalities: list[str]
    conversation: str  # "auto": its item joins the conversation; "none": out of band
    instructions: str
    context: list[Item]
    output_format: dict[str, Any]
    voice: Synthesizer
    metadata: Any = None
    status: str = "in_progress"
    status_details: dict[str, Any] | None = None
    clauses: list[Clause] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # text modality: what was sent
    task: asyncio.Task[None] | None = None
    encoder: OutputEncoder | None = None
    prepared: PreparedReply | None = None  # begun on the tentative transcript
    tools: list[dict[str, Any]] = field(default_factory=list)  # in the chat format
    tool_choice: Any = None
    outputs: list[Item] = field(default_factory=list)  # in output order
    calls: dict[int, Item] = field(default_factory=dict)  # function calls by their index

    def index(self, item: Item) -> int:
        return self.outputs.index(item)

    @property
    def audio(self) -> bool:
        return "audio" in self.modalities

    @property
    def done(self) -> bool:
        return self.status != "in_progress"

    @property
    def transcript(self) -> str:
        if not self.audio:
            return "".join(self.text)
        return " ".join(c.text for c in self.clauses if c.sent)

    def part(self) -> dict[str, Any]:
        """The ``response.content_part`` (``audio`` / ``text``)."""
        if self.audio:
            return {"type": "audio", "transcript": self.transcript}
        return {"type": "text", "text": self.transcript}

    def content(self) -> dict[str, Any]:
        """The assistant item's content (``output_audio`` / ``output_text``)."""
        if self.audio:
            return {"type": "output_audio", "transcript": self.transcript}
        return {"type": "output_text", "text": self.transcript}

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "realtime.response", "status": self.status,
                "status_details": self.status_details,
                "output": [i.as_json() for i in self.outputs]
                if self.status != "in_progress" else [],
                "conversation_id": "conv_" + self.id[5:] if self.conversation == "auto"
                else None,
                "output_modalities": self.modalities, "max_output_tokens": "inf",
                "audio": {"output": {"format": self.output_format, "voice": self.voice.name}},
                "metadata": self.metadata,
                "usage": None if self.status == "in_progress" else {
                    "total_tokens": 0, "input_tokens": 0, "output_tokens": 0,
                    "input_token_details": {"text_tokens": 0, "audio_tokens": 0,
                                            "cached_tokens": 0},
                    "output_token_details": {"text_tokens": 0, "audio_tokens": 0}}}


def heard_transcript(clauses: list[Clause], audio_end_ms: float) -> str:
    """The transcript as far as ``audio_end_ms`` of the audio was heard: whole clauses, and of
    the clause playing then, its words in proportion to its audio heard."""
    words: list[str] = []
    at = 0.0
    for clause in clauses:
        if not clause.sent or at >= audio_end_ms:
            break
        if at + clause.audio_ms <= audio_end_ms:
            words.extend(clause.text.split())
        else:
            share = (audio_end_ms - at) / clause.audio_ms if clause.audio_ms else 0
            pieces = clause.text.split()
            words.extend(pieces[: int(len(pieces) * share)])
        at += clause.audio_ms
    return " ".join(words)
