"""Hard limits on offers and trickle sdpfrags, checked in one pass before any SDP parser runs.

aiortc's SDP parser and aioice's candidate handling cost far more per line than a read: an offer
of 46,000 ``a=ssrc`` lines held the event loop 32.6 s, a PATCH of 12,000 candidates over 60 s,
and every candidate becomes STUN checks sent to the address it names (3,000 candidates aimed at
one port drew 6,018 packets there in 30 s). So before parsing, a body is counted line by line
(linear, no regex backtracking: 1 MB takes milliseconds) and refused with a 400 naming the limit
it broke. The defaults sit far above what browsers send: Chromium 156's offers (sdp/) have one
m-section, ≤ 40 lines, ≤ 2 ssrc lines, ≤ 2 candidates, lines ≤ 118 characters.

``.local`` (mDNS) candidates are dropped: aioice resolves each one in turn with a 1 s timeout (a
20-candidate PATCH took 20 s), and the WHEP/ICE specs let an agent ignore candidates it cannot
use; a browser that hides its addresses behind mDNS is still reached through the peer-reflexive
candidate its own checks create. Each session's remote candidates are capped in total (offer
plus every PATCH), which bounds the STUN checks it can make the gateway send.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SdpLimits:
    max_line_chars: int = 4096  # an a=fingerprint or a long a=fmtp is < 200
    max_media_sections: int = 16  # a browser's audio + video + data is 3
    max_attributes: int = 2000  # a=lines in the whole offer (Chromium, audio+video: ≈150)
    max_ssrc_lines: int = 128  # a=ssrc and a=ssrc-group (simulcast video: ≈12 per section)
    max_candidates: int = 64  # remote candidates per session: offer + every trickle PATCH


class SdpLimitExceeded(ValueError):
    """A body over one of the limits: ``limit`` names it (the API error says which)."""

    def __init__(self, limit: str, message: str, code: str = "sdp_limit") -> None:
        super().__init__(message)
        self.limit = limit
        self.message = message
        self.code = code  # the API error code


def _is_mdns(line: str) -> bool:
    # a=candidate:<foundation> <component> <transport> <priority> <address> <port> typ ...
    fields = line.split(" ", 5)
    return len(fields) > 4 and fields[4].lower().rstrip(".").endswith(".local")


def checked_sdp(text: str, limits: SdpLimits, *, fragment: bool = False) -> tuple[str, int]:
    """``text`` with its ``.local`` candidates left out, and how many candidates it keeps;
    raises ``SdpLimitExceeded`` if it breaks a limit. ``fragment``: a trickle sdpfrag (no
    m-section needed; its candidates are counted against the session by the caller)."""
    media = attributes = ssrc = candidates = 0
    mids: set[str] = set()
    kept: list[str] = []
    dropped = False
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > limits.max_line_chars:
            raise SdpLimitExceeded(
                "max_line_chars", f"line {number} has {len(line)} characters; at most "
                f"{limits.max_line_chars} are accepted")
        stripped = line.strip()
        if stripped.startswith("m="):
            media += 1
            if media > limits.max_media_sections:
                raise SdpLimitExceeded(
                    "max_media_sections",
                    f"more than {limits.max_media_sections} m-sections")
        elif stripped.startswith("a="):
            attributes += 1
            if attributes > limits.max_attributes:
                raise SdpLimitExceeded(
                    "max_attributes", f"more than {limits.max_attributes} attribute lines")
            if stripped.startswith(("a=ssrc:", "a=ssrc-group:")):
                ssrc += 1
                if ssrc > limits.max_ssrc_lines:
                    raise SdpLimitExceeded(
                        "max_ssrc_lines", f"more than {limits.max_ssrc_lines} a=ssrc lines")
            elif stripped.startswith("a=mid:"):
                mid = stripped[6:]
                if mid in mids and not fragment:  # aiortc fails on it with an AttributeError
                    raise SdpLimitExceeded(
                        "unique_mid", f"two m-sections have a=mid:{mid}", "invalid_sdp")
                mids.add(mid)
            elif stripped.startswith("a=candidate:"):
                if _is_mdns(stripped):
                    dropped = True
                    continue
                candidates += 1
                if candidates > limits.max_candidates:
                    raise SdpLimitExceeded(
                        "max_candidates",
                        f"more than {limits.max_candidates} candidates per session")
        kept.append(line)
    if not dropped:
        return text, candidates
    return "\r\n".join(kept) + ("\r\n" if not fragment else "\n"), candidates


class CandidateBudget:
    """Remote candidates each session has given so far (offer + PATCHes), up to the cap."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._used: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def charge(self, session: Any, count: int) -> None:
        used = self._used.get(session, 0) + count
        if used > self.limit:
            raise SdpLimitExceeded(
                "max_candidates", f"this session would have {used} remote candidates; at most "
                f"{self.limit} are accepted")
        self._used[session] = used
