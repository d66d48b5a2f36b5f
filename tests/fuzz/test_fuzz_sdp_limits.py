"""checked_sdp (api/sdp_limits.py), the limits every offer and sdpfrag passes before a parser:
a body within the limits comes back unchanged but for its .local candidates; one over any limit
raises SdpLimitExceeded naming that limit, and nothing else escapes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.api.sdp_limits import SdpLimitExceeded, SdpLimits, checked_sdp
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import candidate_line, sdp_text, sdpfrag_text

pytestmark = FUZZ_MARKS
SMALL = SdpLimits(max_line_chars=120, max_media_sections=2, max_attributes=12,
                  max_ssrc_lines=3, max_candidates=4)
LIMIT_NAMES = {"max_line_chars", "max_media_sections", "max_attributes", "max_ssrc_lines",
               "max_candidates", "unique_mid"}


def counts(text: str) -> dict[str, int]:
    """The model: what each limit counts in ``text``."""
    lines = [line.strip() for line in text.splitlines()]
    attrs = [line for line in lines if line.startswith("a=")]
    return {
        "max_line_chars": max((len(raw) for raw in text.splitlines()), default=0),
        "max_media_sections": sum(line.startswith("m=") for line in lines),
        "max_attributes": len(attrs),
        "max_ssrc_lines": sum(line.startswith(("a=ssrc:", "a=ssrc-group:")) for line in attrs),
    }


@fuzz_settings()
@given(st.one_of(sdp_text, sdpfrag_text), st.booleans())
def test_over_a_limit_is_refused_naming_it_and_within_passes(text, fragment):
    seen = counts(text)
    try:
        kept, candidates = checked_sdp(text, SMALL, fragment=fragment)
    except SdpLimitExceeded as exc:
        assert exc.limit in LIMIT_NAMES
        if exc.limit in seen:
            assert seen[exc.limit] > getattr(SMALL, exc.limit), (exc.limit, seen)
        return
    for limit, count in seen.items():
        assert count <= getattr(SMALL, limit), (limit, seen)
    assert candidates <= SMALL.max_candidates
    if ".local" not in text.lower():
        assert kept == text


@fuzz_settings()
@given(st.lists(candidate_line, max_size=12), st.integers(0, 12))
def test_candidates_are_counted_and_mdns_ones_dropped(lines, local):
    mdns = [f"a=candidate:{i} 1 udp 1 {i:x}-ab.local 9 typ host" for i in range(local)]
    text = "\r\n".join(["a=mid:0", *lines, *mdns]) + "\r\n"
    limits = SdpLimits(max_candidates=8)
    try:
        kept, count = checked_sdp(text, limits, fragment=True)
    except SdpLimitExceeded as exc:
        assert exc.limit in ("max_candidates", "max_line_chars"), exc.limit
        return
    assert count <= 8
    hosts = [line.split(" ")[4:5] for line in kept.splitlines()
             if line.strip().startswith("a=candidate:")]
    assert not any(h and h[0].lower().rstrip(".").endswith(".local") for h in hosts)
