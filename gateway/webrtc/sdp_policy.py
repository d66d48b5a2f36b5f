"""What the gateway accepts in an offer and pins in its answer (RFC 7587 Opus, RFC 4585 NACK).

The gateway sends one thing: 24 kHz mono Opus with in-band FEC. The answer lists Opus alone,
under the payload type the offer chose (never assumed to be 111), with

    a=fmtp:<pt> minptime=10;useinbandfec=1;stereo=0;sprop-stereo=0;maxplaybackrate=24000;
                sprop-maxcapturerate=24000
    a=rtcp-fb:<pt> nack

``maxplaybackrate`` is a receiver hint that caps the *other* side's encoder; ``sprop-*`` declare
what we send. ``nack`` is answered even when the offer lacks it: Chromium then sends generic
NACKs for audio, which the gateway's frame store serves.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from aiortc import sdp as aiortc_sdp
from aiortc.rtcrtpparameters import RTCRtcpFeedback, RTCRtpCodecParameters

OPUS_MIME = "audio/opus"
OPUS_FMTP: dict[str, int] = {
    "minptime": 10,
    "useinbandfec": 1,
    "stereo": 0,
    "sprop-stereo": 0,
    "maxplaybackrate": 24000,
    "sprop-maxcapturerate": 24000,
}
OPUS_FEEDBACK = ("nack",)
RECEIVING_DIRECTIONS = ("sendrecv", "recvonly")


class SdpRejected(ValueError):
    """The offer cannot be answered. ``code`` is the API error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class OfferSummary:
    opus_payload_type: int
    audio_mid: str | None
    audio_index: int
    offered_feedback: tuple[str, ...]
    media_kinds: tuple[str, ...]
    audio_direction: str = "sendrecv"  # the offerer's: sendrecv (a microphone) or recvonly
    red_payload_type: int | None = None  # RFC 2198 RED over this Opus (red/48000/2, "pt/pt")


def answer_direction(offer: OfferSummary, uplink: bool) -> str:
    """Our audio direction: ``sendrecv`` only when the offer sends audio and the gateway is to
    hear it (``uplink``); otherwise ``sendonly`` (a listener costs nothing extra)."""
    return "sendrecv" if uplink and offer.audio_direction == "sendrecv" else "sendonly"


def inspect_offer(sdp_text: str) -> OfferSummary:
    """Validate an offer for this gateway; raise SdpRejected naming the problem."""
    if not sdp_text or not sdp_text.lstrip().startswith("v="):
        raise SdpRejected("invalid_sdp", "the body is not an SDP description (must start 'v=')")
    try:
        description = aiortc_sdp.SessionDescription.parse(sdp_text)
    except Exception as exc:  # aiortc's parser raises whatever it trips on
        raise SdpRejected("invalid_sdp", f"the SDP could not be parsed: {exc!r}") from exc
    kinds = tuple(m.kind for m in description.media)
    for index, media in enumerate(description.media):
        if media.kind != "audio":
            continue
        if media.direction not in RECEIVING_DIRECTIONS:
            raise SdpRejected(
                "audio_not_receivable",
                f"the audio section is '{media.direction}': the offerer must be able to receive "
                "(sendrecv or recvonly)",
            )
        if media.ice is None or not media.ice.usernameFragment or not media.ice.password:
            raise SdpRejected("no_ice_credentials", "the audio section has no ice-ufrag/ice-pwd")
        if media.dtls is None or not media.dtls.fingerprints:
            raise SdpRejected(
                "no_dtls_fingerprint", "the audio section has no DTLS fingerprint (a=fingerprint)"
            )
        listed = set(media.fmt) if media.fmt else set()
        for codec in media.rtp.codecs:
            if codec.mimeType.lower() == OPUS_MIME and codec.clockRate == 48000:
                if not 0 <= codec.payloadType <= 127 or (
                    listed and str(codec.payloadType) not in {str(f) for f in listed}
                ):
                    continue  # an rtpmap for a payload type the m= line does not offer
                red_pt = _red_over(media.rtp.codecs, codec.payloadType, listed)
                return OfferSummary(
                    opus_payload_type=codec.payloadType,
                    audio_mid=media.rtp.muxId or None,
                    audio_index=index,
                    offered_feedback=tuple(fb.type for fb in codec.rtcpFeedback),
                    media_kinds=kinds,
                    audio_direction=media.direction or "sendrecv",
                    red_payload_type=red_pt,
                )
        raise SdpRejected(
            "no_opus", "the audio section offers no opus/48000 codec; the gateway sends only Opus"
        )
    raise SdpRejected("no_audio", "the offer has no audio section (m=audio)")


def _red_over(
    codecs: list[RTCRtpCodecParameters], opus_pt: int, listed: set[object] | None = None
) -> int | None:
    """The offer's RED payload type whose blocks are this Opus (``a=fmtp:63 111/111``): its own
    payload type, one the m= line offers."""
    offered = {str(f) for f in listed} if listed else None
    for codec in codecs:
        if codec.payloadType == opus_pt or not 0 <= codec.payloadType <= 127:
            continue
        if offered is not None and str(codec.payloadType) not in offered:
            continue
        if codec.mimeType.lower() == "audio/red" and codec.clockRate == 48000:
            blocks = "/".join(str(k) for k in codec.parameters)
            if set(blocks.split("/")) == {str(opus_pt)}:
                return codec.payloadType
    return None


def red_codec(payload_type: int, opus_pt: int) -> RTCRtpCodecParameters:
    """The RED entry the answer lists after Opus (Chromium then decodes RED from us)."""
    return RTCRtpCodecParameters(
        mimeType="audio/red", clockRate=48000, channels=2, payloadType=payload_type,
        parameters={f"{opus_pt}/{opus_pt}": None},
    )


def answer_codec(
    negotiated: list[RTCRtpCodecParameters], nack: bool = True
) -> RTCRtpCodecParameters:
    """The single codec the answer lists: the negotiated Opus entry with our pinned lines."""
    for codec in negotiated:
        if codec.mimeType.lower() == OPUS_MIME:
            pinned = copy.deepcopy(codec)
            pinned.parameters = dict(OPUS_FMTP)
            pinned.rtcpFeedback = [RTCRtcpFeedback(type=t) for t in OPUS_FEEDBACK] if nack else []
            return pinned
    raise SdpRejected("no_opus", "Opus was not negotiated")


def opus_fmtp_line(payload_type: int) -> str:
    return f"a=fmtp:{payload_type} " + ";".join(f"{k}={v}" for k, v in OPUS_FMTP.items())
