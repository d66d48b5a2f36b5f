"""inspect_offer (session/sdp_policy.py) on mutated real offers: only SdpRejected escapes."""

from __future__ import annotations

import pytest
from hypothesis import given

from gateway.webrtc.sdp_policy import (
    RECEIVING_DIRECTIONS,
    OfferSummary,
    SdpRejected,
    inspect_offer,
)
from tests.fuzz.profiles import FUZZ_MARKS, fuzz_settings
from tests.fuzz.strategies import CORPUS, OFFERS, note_event, sdp_text

pytestmark = FUZZ_MARKS

CHROMIUM = next(text for text in OFFERS if "a=rtpmap:111 opus/48000/2" in text)


def check(text: str) -> OfferSummary | None:
    try:
        summary = inspect_offer(text)
    except SdpRejected as exc:
        note_event(f"rejected: {exc.code}")
        assert isinstance(exc.code, str) and exc.code
        assert isinstance(exc.message, str) and exc.message
        return None
    assert isinstance(summary, OfferSummary)
    note_event("accepted")
    assert isinstance(summary.opus_payload_type, int)
    assert summary.media_kinds[summary.audio_index] == "audio"
    assert "audio" not in summary.media_kinds[: summary.audio_index]  # the first audio section
    assert summary.audio_direction in RECEIVING_DIRECTIONS
    assert all(isinstance(fb, str) for fb in summary.offered_feedback)
    assert summary.audio_mid is None or isinstance(summary.audio_mid, str)
    return summary


def test_corpus_offers_are_accepted():
    for text in OFFERS:
        assert check(text) is not None


@fuzz_settings()
@given(sdp_text)
def test_inspect_offer_raises_only_sdp_rejected(text):
    check(text)


@pytest.mark.parametrize("text", CORPUS[:1])
def test_inspect_offer_huge_and_odd_inputs(text):
    """Hand-picked edges the strategy reaches only rarely."""
    for odd in (
        "", "v", "v=", "v=0", "v=0\r\n" * 4000, " \ufeffv=0\r\n", "v=0\r\nm=audio\r\n",
        text.replace("\r\n", "\n"), text.replace("\r\n", "\r"), text.replace("\r\n", "\u2028"),
        text + "a=ice-ufrag:" + "x" * 16_000, text.replace("111", "1" * 4400),
        text.replace("a=mid:0", "a=mid:\ud800"), text.replace("\r\n", "\x00\r\n"),
    ):
        check(odd)


# --- policy bugs this fuzzing found (regression cases, fixed) ---------------------------------


# Was: inspect_offer accepted an Opus rtpmap whose payload type is not on the m=audio line (or
# outside 0..127); the session then answered Opus under PT 96, which the offer never listed.
@pytest.mark.parametrize("pt", ["300", "-5", "35"])
def test_accepted_payload_type_is_one_the_offer_lists(pt):
    munged = CHROMIUM.replace(":111 ", f":{pt} ").replace("fmtp:63 111/111", f"fmtp:63 {pt}/{pt}")
    try:
        summary = inspect_offer(munged)
    except SdpRejected:
        return  # rejecting it is a fix too
    m_line = next(line for line in munged.splitlines() if line.startswith("m=audio "))
    assert 0 <= summary.opus_payload_type <= 127
    assert str(summary.opus_payload_type) in m_line.split()[3:]


# Was: an offer mapping one payload type twice (a=rtpmap:111 red/48000/2 and a=rtpmap:111
# opus/48000/2, a=fmtp:111 111/111) was accepted with red_payload_type == opus_payload_type.
def test_red_never_shares_the_opus_payload_type():
    munged = CHROMIUM.replace(
        "a=rtpmap:111 opus/48000/2", "a=rtpmap:111 red/48000/2\r\na=rtpmap:111 opus/48000/2"
    ).replace("a=fmtp:111 minptime=10;useinbandfec=1", "a=fmtp:111 111/111")
    try:
        summary = inspect_offer(munged)
    except SdpRejected:
        return  # rejecting a payload type mapped twice is a fix too
    assert getattr(summary, "red_payload_type", None) != summary.opus_payload_type
