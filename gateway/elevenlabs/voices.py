"""Which gateway voice an ElevenLabs ``voice_id`` means.

As with OpenAI's built-in names in the speech API: our own voice names select our voices; the
ids of ElevenLabs' premade voices (the ones their docs, examples and client defaults use --
LiveKit's default is ``hpp4J3VqNfWAUOO0d1Us``) all mean the default voice, so a client
configured for ElevenLabs works unchanged; anything else is ``unknown_voice``.
"""

from __future__ import annotations

from collections.abc import Sequence

PREMADE = {
    "hpp4J3VqNfWAUOO0d1Us": "Bella",  # LiveKit's DEFAULT_VOICE_ID
    "21m00Tcm4TlvDq8ikWAM": "Rachel",
    "AZnzlk1XvdvUeBnXmlld": "Domi",
    "EXAVITQu4vr4xnVMPX5q": "Sarah",
    "ErXwobaYiN019PkySvjV": "Antoni",
    "MF3mGyEYCl7XYWbV9V6O": "Elli",
    "TxGEqnHWrfWFTfGW9XjX": "Josh",
    "VR6AewLTigWG4xSOukaq": "Arnold",
    "pNInz6obpgDQGcFmaJgB": "Adam",
    "yoZ06aMxZJJ28mfd3POQ": "Sam",
    "JBFqnCBsd6RMkjVDRZzb": "George",
    "cgSgspJ2msm6clMCkdW9": "Jessica",
    "nPczCjzI2devNBz1zQrb": "Brian",
    "onwK4e9ZLuTAKqWW03F9": "Daniel",
    "XB0fDUnXU5powFXDhCwa": "Charlotte",
    "pFZP5JQG7iQjIQuC4Bku": "Lily",
    "Xb7hH8MSUJpSbSDYk0k2": "Alice",
    "iP95p4xoKVk53GoZ742B": "Chris",
    "bIHbv24MWmeRgasZH58o": "Will",
    "cjVigY5qzO86Huf0OWal": "Eric",
    "N2lVS1w4EtoT3dr4eOWO": "Callum",
    "IKne3meq5aSn9XLyUdCD": "Charlie",
    "TX3LPaxmHKxFdv7VOQHJ": "Liam",
    "SAz9YHcvj6GT2YYXdXww": "River",
    "FGY2WhTYpPnrIDTdsKH5": "Laura",
}


def resolve_voice(voice_id: str, names: Sequence[str], default: str) -> str | None:
    """Our voice name for ``voice_id``, or None when it names no voice."""
    if voice_id in names:
        return voice_id
    if voice_id in PREMADE:
        return default
    return None


def voice_list(names: Sequence[str], default: str) -> list[dict[str, object]]:
    """``GET /v1/elevenlabs/voices``: their ``{"voices": [...]}`` entries for our voices."""
    return [{"voice_id": n, "name": n, "category": "premade", "labels": {},
             "is_default": n == default} for n in names]
