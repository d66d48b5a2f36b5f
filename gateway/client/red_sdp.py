"""Offering RFC 2198 RED as Chromium does, and reading what the answer made of it.

aiortc offers no RED: :func:`offer_red` adds ``red/48000/2`` right after Opus on the audio m=
line, with ``a=fmtp:<red> <opus>/<opus>`` (one redundant Opus block per packet at most as far
as the SDP says; the sender chooses how many). :func:`answered_red` finds the RED payload type
over Opus in an answer. The client then routes that payload type to its receiver
(``aiortc_compat.accept_payload_type``) and unwraps the packets itself.
"""

from __future__ import annotations

import re

RED_PT = 63  # Chromium's
_OPUS = re.compile(r"^a=rtpmap:(\d+) opus/48000/2\r?$", re.IGNORECASE | re.MULTILINE)
_RED = re.compile(r"^a=rtpmap:(\d+) red/48000/2\r?$", re.IGNORECASE | re.MULTILINE)
_AUDIO = re.compile(r"^(m=audio \S+ \S+)((?: \d+)+)(\r?)$", re.MULTILINE)


def _used_types(sdp: str) -> set[int]:
    return {int(pt) for pt in re.findall(r"^a=rtpmap:(\d+) ", sdp, re.MULTILINE)}


def offer_red(sdp: str, red_pt: int = RED_PT) -> str:
    """The offer with RED over its Opus (unchanged when it has no Opus, or RED already)."""
    opus = _OPUS.search(sdp)
    if opus is None or _RED.search(sdp):
        return sdp
    used = _used_types(sdp)
    candidates = [red_pt, *range(62, 34, -1), *range(127, 95, -1)]  # dynamic types
    red_pt = next(pt for pt in candidates if pt not in used)
    opus_pt = int(opus[1])

    def add_to_m_line(m: re.Match[str]) -> str:
        types = m[2].split()
        at = types.index(str(opus_pt)) + 1 if str(opus_pt) in types else len(types)
        types.insert(at, str(red_pt))
        return f"{m[1]} {' '.join(types)}{m[3]}"

    sdp = _AUDIO.sub(add_to_m_line, sdp, count=1)
    eol = "\r\n" if "\r\n" in sdp else "\n"
    line = opus.group(0).rstrip("\r")
    return sdp.replace(
        line + eol,
        f"{line}{eol}a=rtpmap:{red_pt} red/48000/2{eol}a=fmtp:{red_pt} {opus_pt}/{opus_pt}{eol}",
        1,
    )


def answered_red(sdp: str) -> tuple[int, int] | None:
    """``(red_pt, opus_pt)`` when the answer accepted RED over its Opus, else None."""
    red, opus = _RED.search(sdp), _OPUS.search(sdp)
    if red is None or opus is None:
        return None
    red_pt, opus_pt = int(red[1]), int(opus[1])
    fmtp = re.search(rf"^a=fmtp:{red_pt} (\S+?)\r?$", sdp, re.MULTILINE)
    if fmtp is not None and {int(p) for p in fmtp[1].split("/") if p.isdigit()} != {opus_pt}:
        return None  # RED over something else
    return red_pt, opus_pt
