"""What every session of a gateway is made with (from the settings in gateway/config/)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.media.opus_codec import EncoderSettings
from gateway.media.sink import DEFAULT_PLAYOUT_ALLOWANCE_S


@dataclass(frozen=True, slots=True)
class SessionOptions:
    encoder: EncoderSettings = field(default_factory=EncoderSettings)
    queue_frames: int = 50  # ≈1 s of audio between encoder and track
    store_frames: int = 250  # 5 s of sent packets kept for retransmission
    max_pending_utterances: int = 32
    connect_timeout_s: float = 30.0  # a session that never connects is reaped
    answer_nack: bool = True  # a=rtcp-fb:<pt> nack in the answer (off only to compare, in tests)
    test_drop_first_tx_percent: float = 0.0  # TEST ONLY: lose this share of first transmissions
    test_drop_seed: int | None = None
    test_drop_burst: float = 0.0  # TEST ONLY: mean burst length of those losses (0: independent)
    test_repair_delay_ms: float = 0.0  # TEST ONLY: resends leave this late (a long round trip)
    idle_packets: str = "silence"  # between utterances (batch path): "silence" / "dtx"
    early_first_frame: bool = False  # an idle stream sends a first frame at once (batch path)
    release_dtls: bool = True  # free OpenSSL's DTLS state once connected (aiortc_compat)
    rx_fast_path: bool = True  # a talker's SRTP straight from the shared socket (aiortc_compat)
    rtcp_fast_path: bool = True  # a session's SRTCP straight from the shared socket (the same)
    send_in_c: bool = True  # C sends a stream, RED and DTX included (batch_sender)
    rtcp_report_interval_s: float = 5.0  # sender reports' mean interval (libwebrtc's audio)
    red_distance: int = 2  # RFC 2198: previous frames each packet carries (0: no RED)
    red_max_distance: int = 0  # ... raised up to this while NACKs show longer bursts (0: never)
    red_adaptive: bool = True  # RED only while the receiver reports loss
    playout_allowance_s: float = DEFAULT_PLAYOUT_ALLOWANCE_S  # receiver playout delay (heard)
    stun_checks_per_s: float = 20.0  # new ICE checks per second per session (aiortc_compat)
    uplink: bool = False  # answer sendrecv offers sendrecv and hear the user (full duplex, next)
