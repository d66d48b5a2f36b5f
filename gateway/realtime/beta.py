"""The beta Realtime dialect (``OpenAI-Beta: realtime=v1``), mapped to and from GA, in one
place. Clients that send the header (most published browser examples, the older SDKs) get
the beta event names and session shape; everyone else gets GA.

Server events, GA -> beta (everything else keeps its name):

====================================== ======================================
GA                                     beta
====================================== ======================================
response.output_audio.delta / .done    response.audio.delta / .done
response.output_audio_transcript.*     response.audio_transcript.*
response.output_text.delta / .done     response.text.delta / .done
conversation.item.added                conversation.item.created
conversation.item.done                 (not sent)
session.created / .updated             the session in the beta shape (below)
====================================== ======================================

Session, beta <-> GA: ``modalities`` <-> ``output_modalities`` (beta ["text", "audio"] is GA
["audio"]), ``voice`` <-> ``audio.output.voice``, ``input_audio_format`` /
``output_audio_format`` ("pcm16", "g711_ulaw", "g711_alaw") <-> ``audio.input.format`` /
``audio.output.format``, ``input_audio_transcription`` <-> ``audio.input.transcription``,
``turn_detection`` <-> ``audio.input.turn_detection``, ``max_response_output_tokens`` <->
``max_output_tokens``. Items: an assistant's ``audio`` / ``text`` content is GA's
``output_audio`` / ``output_text``. ``response.create``'s ``modalities``, ``voice`` and
``output_audio_format`` likewise.
"""

from __future__ import annotations

import copy
from typing import Any

from gateway.realtime.audio_formats import BETA_NAMES

SERVER_NAMES = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "conversation.item.added": "conversation.item.created",
}
DROPPED = frozenset({"conversation.item.done"})
FORMAT_TYPES = {beta: ga for ga, beta in BETA_NAMES.items()}
CONTENT_TO_BETA = {"output_audio": "audio", "output_text": "text"}
CONTENT_TO_GA = {"audio": "output_audio", "text": "output_text"}


def wants_beta(headers: Any, protocols: list[str]) -> bool:
    beta = headers.get("OpenAI-Beta", "")
    return "realtime=v1" in beta.replace(" ", "") or "openai-beta.realtime-v1" in protocols


def _items(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, dict) and value.get("type") == "message":
        value = dict(value)
        value["content"] = [{**part, "type": mapping.get(part.get("type"), part.get("type"))}
                            if isinstance(part, dict) else part
                            for part in value.get("content") or []]
    return value


def session_to_beta(session: dict[str, Any]) -> dict[str, Any]:
    audio = session.get("audio", {})
    inp, out = audio.get("input", {}), audio.get("output", {})
    mods = session.get("output_modalities", ["audio"])
    return {
        "id": session.get("id"), "object": "realtime.session", "model": session.get("model"),
        "expires_at": session.get("expires_at"),
        "modalities": ["text", "audio"] if "audio" in mods else ["text"],
        "instructions": session.get("instructions"), "voice": out.get("voice"),
        "input_audio_format": BETA_NAMES.get(inp.get("format", {}).get("type"), "pcm16"),
        "output_audio_format": BETA_NAMES.get(out.get("format", {}).get("type"), "pcm16"),
        "input_audio_transcription": inp.get("transcription"),
        "turn_detection": inp.get("turn_detection"),
        "input_audio_noise_reduction": inp.get("noise_reduction"),
        "tools": session.get("tools", []), "tool_choice": session.get("tool_choice", "auto"),
        "temperature": session.get("temperature", 0.8),
        "max_response_output_tokens": session.get("max_output_tokens", "inf"),
        "speed": out.get("speed", 1.0),
    }


def to_beta(event: dict[str, Any]) -> dict[str, Any] | None:
    """A GA server event as the beta API named and shaped it (None: beta had no such event)."""
    kind = event["type"]
    if kind in DROPPED:
        return None
    event = dict(event, type=SERVER_NAMES.get(kind, kind))
    if "session" in event and kind.startswith("session."):
        event["session"] = session_to_beta(event["session"])
    if "item" in event:
        event["item"] = _items(event["item"], CONTENT_TO_BETA)
    if "response" in event and isinstance(event["response"], dict):
        response = dict(event["response"])
        response["modalities"] = response.pop("output_modalities", ["audio"])
        response["output"] = [_items(i, CONTENT_TO_BETA) for i in response.get("output", [])]
        event["response"] = response
    return event


def _format(value: Any) -> Any:
    return {"type": FORMAT_TYPES.get(value, value)} if isinstance(value, str) else value


def session_to_ga(session: Any) -> Any:
    if not isinstance(session, dict):
        return session
    beta = copy.deepcopy(session)
    ga: dict[str, Any] = {"type": "realtime"}
    audio_in: dict[str, Any] = {}
    audio_out: dict[str, Any] = {}
    for key, value in beta.items():
        if key == "modalities":
            ga["output_modalities"] = ["audio"] if isinstance(value, list) and "audio" in value \
                else value
        elif key == "voice":
            audio_out["voice"] = value
        elif key == "speed":
            audio_out["speed"] = value
        elif key == "input_audio_format":
            audio_in["format"] = _format(value)
        elif key == "output_audio_format":
            audio_out["format"] = _format(value)
        elif key == "input_audio_transcription":
            audio_in["transcription"] = value
        elif key == "input_audio_noise_reduction":
            audio_in["noise_reduction"] = value
        elif key == "turn_detection":
            audio_in["turn_detection"] = value
        elif key == "max_response_output_tokens":
            ga["max_output_tokens"] = value
        else:
            ga[key] = value
    if audio_in or audio_out:
        ga["audio"] = {**({"input": audio_in} if audio_in else {}),
                       **({"output": audio_out} if audio_out else {})}
    return ga


def to_ga(event: dict[str, Any]) -> dict[str, Any]:
    """A beta client event as GA."""
    kind = event["type"]
    if kind == "session.update":
        return dict(event, session=session_to_ga(event.get("session")))
    if kind == "conversation.item.create":
        return dict(event, item=_items(event.get("item"), CONTENT_TO_GA))
    if kind == "response.create" and isinstance(event.get("response"), dict):
        response = dict(event["response"])
        if "modalities" in response:
            mods = response.pop("modalities")
            response["output_modalities"] = ["audio"] if isinstance(mods, list) \
                and "audio" in mods else mods
        output: dict[str, Any] = {}
        if "voice" in response:
            output["voice"] = response.pop("voice")
        if "output_audio_format" in response:
            output["format"] = _format(response.pop("output_audio_format"))
        if output:
            response["audio"] = {"output": output}
        return dict(event, response=response)
    return event
