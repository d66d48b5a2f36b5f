"""The SDP policy against the corpus in sdp/: each offer must produce its stored answer.

Lines that differ on every run (ICE credentials and candidates, fingerprints, ssrc/msid/cname,
origin, port) are left out of the comparison. ``SDP_CORPUS_REGEN=1`` rewrites the answers;
review the diff before committing it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gateway.webrtc.sdp_policy import inspect_offer, opus_fmtp_line

CORPUS = Path(__file__).resolve().parent.parent / "sdp"
OFFERS = sorted(CORPUS.glob("*.offer.sdp"))
VOLATILE = (
    "a=candidate:", "a=end-of-candidates", "a=ice-ufrag:", "a=ice-pwd:", "a=fingerprint:",
    "a=ssrc:", "a=msid:", "o=", "c=", "a=rtcp:",
)


def normalize(sdp: str) -> list[str]:
    lines = []
    for line in sdp.splitlines():
        line = line.strip()
        if not line or line.startswith(VOLATILE):
            continue
        lines.append(re.sub(r"^m=(\w+) \d+ ", r"m=\1 PORT ", line))
    return lines


def test_corpus_is_not_empty():
    names = {p.name for p in OFFERS}
    assert {"chromium-156-recvonly.offer.sdp", "aiortc-1.16-recvonly.offer.sdp",
            "firefox-style-recvonly.offer.sdp"} <= names


@pytest.mark.parametrize("offer_path", OFFERS, ids=lambda p: p.name.removesuffix(".offer.sdp"))
async def test_offer_produces_its_answer(gateway, offer_path: Path):
    offer = offer_path.read_text()
    async with gateway.http.post(
        f"{gateway.url}/v1/sessions", data=offer, headers={"Content-Type": "application/sdp"}
    ) as r:
        assert r.status == 201, await r.text()
        answer = await r.text()
        session_url = gateway.url + r.headers["Location"]
    async with gateway.http.delete(session_url) as r:
        assert r.status == 204
    answer_path = offer_path.with_name(offer_path.name.replace(".offer.", ".answer."))
    if os.environ.get("SDP_CORPUS_REGEN") == "1":
        answer_path.write_text(answer)
    # The policy, independent of the stored file:
    summary = inspect_offer(offer)
    pt, red = summary.opus_payload_type, summary.red_payload_type
    lines = normalize(answer)
    audio = next(line for line in lines if line.startswith("m=audio"))
    listed = audio.split()[3:]
    # Opus first, under the offer's payload type; RFC 2198 RED over it only if the offer has it
    assert listed == ([str(pt)] if red is None else [str(pt), str(red)]), audio
    if red is not None:
        assert f"a=rtpmap:{red} red/48000/2" in lines and f"a=fmtp:{red} {pt}/{pt}" in lines
    assert opus_fmtp_line(pt) in lines
    assert f"a=rtcp-fb:{pt} nack" in lines
    assert f"a=rtpmap:{pt} opus/48000/2" in lines
    assert "a=sendonly" in lines
    # And the stored answer, line for line:
    assert lines == normalize(answer_path.read_text())
