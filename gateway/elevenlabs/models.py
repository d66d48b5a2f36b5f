"""The ElevenLabs-compatible routes' bodies, for the API document (``gateway.api.openapi``).

The handlers read the JSON themselves (only ``text`` matters; the rest of theirs is accepted
and ignored), so these models describe rather than validate."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ElevenLabsSpeech(BaseModel):
    model_config = ConfigDict(extra="allow")
    text: str = Field(description="the text to speak")
    model_id: str | None = Field(None, description="any; reported nowhere")
    voice_settings: dict[str, Any] | None = Field(None, description="accepted, ignored")


class ElevenLabsAlignment(BaseModel):
    characters: list[str]
    character_start_times_seconds: list[float]
    character_end_times_seconds: list[float]


class ElevenLabsTimedAudio(BaseModel):
    audio_base64: str
    alignment: ElevenLabsAlignment | None
    normalized_alignment: ElevenLabsAlignment | None


class ElevenLabsVoice(BaseModel):
    voice_id: str
    name: str
    category: str
    labels: dict[str, str]
    is_default: bool


class ElevenLabsVoices(BaseModel):
    voices: list[ElevenLabsVoice]
