"""parse_sdpfrag (api/routes.py), the trickle-ICE PATCH body: only ApiError(400) escapes."""

from __future__ import annotations

from aiortc import RTCIceCandidate
from hypothesis import example, given
from hypothesis import strategies as st

from gateway.api.errors import ApiError
from gateway.api.routes import parse_sdpfrag
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import note_event, sdpfrag_text, small_text

pytestmark = FUZZ_MARKS


def model(text: str, mid: str | None) -> tuple[list[str | None], bool, str | None]:
    """What parse_sdpfrag should return, line by line: each candidate's mid, end, ufrag."""
    mids: list[str | None] = []
    end, ufrag = False, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("a=mid:"):
            mid = line[6:]
        elif line.startswith("a=ice-ufrag:"):
            ufrag = line[12:]
        elif line.startswith("a=candidate:"):
            mids.append(mid)
        elif line == "a=end-of-candidates":
            end = True
    return mids, end, ufrag


@fuzz_settings()
@given(sdpfrag_text, st.one_of(st.none(), st.just("0"), small_text))
@example("a=candidate:1 1 udp 1 1.2.3.4 " + "9" * 5000 + " typ host\r\n", "0")
@example("a=candidate:1 1 udp 1 1.2.3.4 9 typ host raddr\r\n", "0")
@example("a=candidate:1 1 udp 1 1.2.3.4 9 typ host rport x\r\n", None)
@example("a=candidate:\u0661 \u0661 udp \u0661 ::1 \u0661 typ host", "0")
def test_parse_sdpfrag_raises_only_api_error(text, mid):
    try:
        candidates, end, ufrag = parse_sdpfrag(text, mid)
    except ApiError as exc:
        note_event(f"ApiError {exc.code}")
        assert exc.status == 400 and exc.code == "invalid_candidate"
        assert isinstance(exc.message, str) and exc.message
        return
    note_event(f"{len(candidates)} candidates")
    mids, want_end, want_ufrag = model(text, mid)
    assert all(isinstance(c, RTCIceCandidate) for c in candidates)
    assert [c.sdpMid for c in candidates] == mids
    assert end is want_end and ufrag == want_ufrag
