"""Text no voice can speak, refused with a 400 before a response starts.

A NUL or a lone UTF-16 surrogate (JSON's ``"\\ud800"`` decodes to one) makes Piper's phonemizer
or a CosyVoice request fail half-way; refused at the door they are a clear error instead of a
stream that has already said 200.
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[\x00\ud800-\udfff]")


def unspeakable(text: str) -> str | None:
    """Why ``text`` cannot be spoken, or None if it can."""
    match = _BAD.search(text)
    if match is None:
        return None
    what = "a NUL character" if match.group() == "\x00" else "a lone surrogate"
    return f"the text holds {what} (U+{ord(match.group()):04X}) at index {match.start()}"
