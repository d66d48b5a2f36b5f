"""A Realtime session's configuration (``session.update``), in the GA shape.

Checked field by field; a field the session does not know is an error naming it (as OpenAI
does), fields it knows but does not act on (tracing, prompt, truncation, noise reduction,
include, reasoning) are kept and echoed. ``semantic_vad`` is served by the Smart Turn model
(listen/turn_model.py, the gateway's ``--turn-detector smart-turn``) for that session, its
``eagerness`` mapped onto the model's waits (``SEMANTIC_BY_EAGERNESS``); ``server_vad`` by the
silence detector with the session's own timings.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gateway.listen.turns import SemanticOptions
from gateway.realtime.audio_formats import FORMATS, PCM
from gateway.realtime.protocol import MAX_TEXT_CHARS, ClientError

MODALITIES = ("text", "audio")
KNOWN = {"type", "model", "instructions", "output_modalities", "audio", "tools", "tool_choice",
         "max_output_tokens", "tracing", "prompt", "truncation", "include", "reasoning",
         "parallel_tool_calls", "id", "object", "expires_at", "temperature"}


@dataclass(frozen=True, slots=True)
class VadSettings:
    """What the turn detector is built with (``turn_detection`` of type server/semantic_vad)."""

    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool = True
    interrupt_response: bool = True
    #: semantic_vad: the turn model decides, with these waits (None: silence alone)
    semantic: SemanticOptions | None = None


# OpenAI's eagerness: how soon a turn judged finished ends, and how long an unfinished one may
# pause ("low" lets the user take their time: the model must be surer, P >= 0.9, which gave
# 3/24 false ends against 5/24 at 0.5 in bench.turns, docs/turns.md, and a question the model
# is unsure of waits 500 ms, the silence detector's own; "high" answers soonest).
# auto = medium = ours.
SEMANTIC_BY_EAGERNESS = {
    "low": SemanticOptions(min_silence_ms=300, unsure_silence_ms=800, max_silence_ms=2000,
                           question_silence_ms=500, threshold=0.9),
    "medium": SemanticOptions(),
    "auto": SemanticOptions(),
    "high": SemanticOptions(min_silence_ms=150, unsure_silence_ms=400, max_silence_ms=800),
}


def _bad(message: str, param: str, event_id: str | None) -> ClientError:
    return ClientError("invalid_value", message, param, event_id)


def audio_format(raw: Any, param: str, event_id: str | None) -> dict[str, Any]:
    if isinstance(raw, str):  # a bare type name
        raw = {"type": raw}
    if not isinstance(raw, dict) or raw.get("type") not in FORMATS:
        raise _bad(f"{param}.type must be one of {', '.join(FORMATS)}", param, event_id)
    if raw["type"] == PCM:
        if raw.get("rate", 24_000) != 24_000:
            raise _bad("audio/pcm is 24000 Hz only", f"{param}.rate", event_id)
        return {"type": PCM, "rate": 24_000}
    return {"type": raw["type"]}


@dataclass
class SessionConfig:
    model: str
    default_silence_ms: int = 500  # the gateway's --turn-silence-ms
    instructions: str = ""
    output_modalities: list[str] = field(default_factory=lambda: ["audio"])
    voice: str = "alloy"
    speed: float = 1.0
    input_format: dict[str, Any] = field(default_factory=lambda: {"type": PCM, "rate": 24_000})
    output_format: dict[str, Any] = field(default_factory=lambda: {"type": PCM, "rate": 24_000})
    turn_detection: dict[str, Any] | None = None
    transcription: dict[str, Any] | None = None
    noise_reduction: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    max_output_tokens: int | str = "inf"
    extra: dict[str, Any] = field(default_factory=dict)  # kept and echoed, not acted on

    def __post_init__(self) -> None:
        if self.turn_detection is None:
            self.turn_detection = self._vad({"type": "server_vad"}, None)

    # -- the turn detector ----------------------------------------------------------------
    def _vad(self, raw: dict[str, Any], event_id: str | None) -> dict[str, Any]:
        kind = raw.get("type")
        if kind == "semantic_vad":
            eagerness = raw.get("eagerness", "auto")
            if eagerness not in ("low", "medium", "high", "auto"):
                raise _bad("eagerness must be low, medium, high or auto",
                           "session.audio.input.turn_detection.eagerness", event_id)
            return {"type": kind, "eagerness": eagerness,
                    "create_response": bool(raw.get("create_response", True)),
                    "interrupt_response": bool(raw.get("interrupt_response", True))}
        if kind != "server_vad":
            raise _bad("turn_detection.type must be server_vad or semantic_vad (or "
                       "turn_detection null: commit by hand)",
                       "session.audio.input.turn_detection.type", event_id)
        out = {"type": kind, "threshold": 0.5, "prefix_padding_ms": 300,
               "silence_duration_ms": self.default_silence_ms, "idle_timeout_ms": None,
               "create_response": True, "interrupt_response": True}
        for name, lo, hi in (("threshold", 0.01, 1.0), ("prefix_padding_ms", 0, 2000),
                             ("silence_duration_ms", 20, 10_000)):
            value = raw.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not lo <= value <= hi:
                raise _bad(f"{name} must be a number from {lo} to {hi}",
                           f"session.audio.input.turn_detection.{name}", event_id)
            out[name] = value if name == "threshold" else int(value)
        for name in ("create_response", "interrupt_response"):
            if raw.get(name) is not None:
                out[name] = bool(raw[name])
        if raw.get("idle_timeout_ms") is not None:
            out["idle_timeout_ms"] = raw["idle_timeout_ms"]
        return out

    @property
    def vad(self) -> VadSettings | None:
        """The detector's settings; None: no turn detection (the client commits)."""
        td = self.turn_detection
        if td is None:
            return None
        if td["type"] == "semantic_vad":
            semantic = SEMANTIC_BY_EAGERNESS[td["eagerness"]]
            return VadSettings(0.5, 300, semantic.unsure_silence_ms, td["create_response"],
                               td["interrupt_response"], semantic)
        return VadSettings(float(td["threshold"]), td["prefix_padding_ms"],
                           td["silence_duration_ms"], td["create_response"],
                           td["interrupt_response"])

    # -- session.update -------------------------------------------------------------------
    def update(self, raw: Any, event_id: str | None = None) -> None:
        """Apply a ``session.update``'s ``session`` (all or nothing)."""
        if not isinstance(raw, dict):
            raise _bad("session must be an object", "session", event_id)
        unknown = sorted(set(raw) - KNOWN)
        if unknown:
            raise ClientError("unknown_parameter", f"Unknown parameter: 'session.{unknown[0]}'",
                              f"session.{unknown[0]}", event_id)
        new = copy.deepcopy(self)
        new._apply(raw, event_id)
        self.__dict__.update(new.__dict__)

    def _apply(self, raw: dict[str, Any], event_id: str | None) -> None:
        if raw.get("type", "realtime") != "realtime":
            raise _bad("session.type must be realtime (transcription sessions are not "
                       "served)", "session.type", event_id)
        if "instructions" in raw:
            text = raw["instructions"]
            if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
                raise _bad(f"instructions must be a string of at most {MAX_TEXT_CHARS} "
                           "characters", "session.instructions", event_id)
            self.instructions = text
        if "output_modalities" in raw:
            self.output_modalities = modalities(raw["output_modalities"],
                                                "session.output_modalities", event_id)
        if "max_output_tokens" in raw:
            value = raw["max_output_tokens"]
            if value != "inf" and (isinstance(value, bool) or not isinstance(value, int)
                                   or not 1 <= value <= 4096):
                raise _bad("max_output_tokens must be 1-4096 or \"inf\"",
                           "session.max_output_tokens", event_id)
            self.max_output_tokens = value
        if "tools" in raw:
            if not isinstance(raw["tools"], list) or len(raw["tools"]) > 128:
                raise _bad("tools must be a list (at most 128)", "session.tools", event_id)
            self.tools = raw["tools"]
        if "tool_choice" in raw:
            self.tool_choice = raw["tool_choice"]
        for name in ("tracing", "prompt", "truncation", "include", "reasoning",
                     "parallel_tool_calls", "temperature"):
            if name in raw:
                self.extra[name] = raw[name]
        audio = raw.get("audio")
        if audio is None:
            return
        if not isinstance(audio, dict):
            raise _bad("audio must be an object", "session.audio", event_id)
        inp, out = audio.get("input") or {}, audio.get("output") or {}
        if not isinstance(inp, dict) or not isinstance(out, dict):
            raise _bad("audio.input and audio.output must be objects", "session.audio",
                       event_id)
        if "format" in inp:
            self.input_format = audio_format(inp["format"], "session.audio.input.format",
                                             event_id)
        if "turn_detection" in inp:
            td = inp["turn_detection"]
            if td is not None and not isinstance(td, dict):
                raise _bad("turn_detection must be an object or null",
                           "session.audio.input.turn_detection", event_id)
            self.turn_detection = None if td is None else self._vad(td, event_id)
        if "transcription" in inp:
            tr = inp["transcription"]
            if tr is not None and not isinstance(tr, dict):
                raise _bad("transcription must be an object or null",
                           "session.audio.input.transcription", event_id)
            self.transcription = None if tr is None else {
                "model": tr.get("model", "whisper-1"), "language": tr.get("language"),
                "prompt": tr.get("prompt")}
        if "noise_reduction" in inp:
            self.noise_reduction = inp["noise_reduction"]
        if "format" in out:
            self.output_format = audio_format(out["format"], "session.audio.output.format",
                                              event_id)
        if "voice" in out:
            voice = out["voice"]
            if isinstance(voice, dict):
                voice = voice.get("id")
            if not isinstance(voice, str) or not voice:
                raise _bad("voice must be a voice name or {\"id\": name}",
                           "session.audio.output.voice", event_id)
            self.voice = voice
        if "speed" in out:
            speed = out["speed"]
            if isinstance(speed, bool) or not isinstance(speed, int | float) \
                    or not 0.25 <= speed <= 1.5:
                raise _bad("speed must be from 0.25 to 1.5", "session.audio.output.speed",
                           event_id)
            self.speed = float(speed)

    def as_json(self, session_id: str, expires_at: int) -> dict[str, Any]:
        return {
            "type": "realtime", "object": "realtime.session", "id": session_id,
            "model": self.model, "expires_at": expires_at,
            "output_modalities": list(self.output_modalities),
            "instructions": self.instructions,
            "tools": self.tools, "tool_choice": self.tool_choice,
            "max_output_tokens": self.max_output_tokens,
            "tracing": None, "prompt": None, "truncation": "auto", "include": None,
            **self.extra,
            "audio": {
                "input": {"format": dict(self.input_format),
                          "transcription": self.transcription,
                          "noise_reduction": self.noise_reduction,
                          "turn_detection": self.turn_detection},
                "output": {"format": dict(self.output_format), "voice": self.voice,
                           "speed": self.speed},
            },
        }


def modalities(raw: Any, param: str, event_id: str | None) -> list[str]:
    if not isinstance(raw, list) or not raw or any(m not in MODALITIES for m in raw):
        raise _bad('output_modalities must be ["audio"] or ["text"]', param, event_id)
    return list(dict.fromkeys(raw))
