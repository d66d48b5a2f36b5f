"""Every use of aiortc's and aioice's private internals, in one package (split by concern:
``ice`` -- host addresses, impairment, restart, the shared UDP socket, check pacing; ``consent``
-- RFC 7675 freshness; ``dtls`` -- DTLS release and SRTP protect; ``rtp_taps`` -- RTP/RTCP taps
and raw sends; ``sender`` -- the batch path's direct sender; ``teardown``; ``_common`` -- shared
helpers). Everything public is re-exported here: callers import ``gateway.aiortc_compat``.

aiortc is pinned (``aiortc==1.16.*``). Each function here names the private attribute it
touches; ``check_internals`` verifies they all still exist and tests/test_aiortc_compat.py fails
loudly when an aiortc upgrade moves one. No other module of the gateway reaches into aiortc.

Touched:
- ``RTCRtpSender.__rtp_history``: the sender's retransmission history is replaced by ours
  (``SenderHistory`` of tests/aiortc_track.py, recording into the 5 s frame store by each
  packet's own sequence number; the tests' pull-based track only). aiortc's module-wide
  ``RTP_HISTORY_SIZE`` is left alone, so any other aiortc sender in the process (an in-process
  client's microphone) keeps aiortc's own history.
- ``RTCRtpTransceiver._codecs``: the negotiated codec list, where the answer's Opus fmtp and
  rtcp-fb lines come from (aiortc intersects feedback with the offer and drops ``nack``).
- ``aioice.ice.get_host_addresses``: restrict host candidates to configured addresses (aioice
  always leaves out 127.0.0.1 and has no option for it).
- ``RTCRtpReceiver._handle_rtp_packet`` / ``__jitter_buffer``: raw RTP taps for our own receive
  path (the headless client).
- ``RTCDtlsTransport._handle_rtcp_data`` / ``_send_rtp`` and ``RTCRtpSender._ssrc`` /
  ``__rtp_header_extensions_map``: our NACK responder sees raw RTCP first (aiortc's parser
  mis-reads NACKs across the sequence wrap and ignores misses) and resends stored packets.
- ``RTCIceTransport._connection`` (aioice ``Connection.data_received``, its protocols'
  datagram transports): in-process network impairment of a peer's UDP datagrams.
- ``RTCDtlsTransport._rtp_router.payload_type_table``: a receiver of ours also takes a payload
  type aiortc does not know (RFC 2198 RED, ``accept_payload_type``).
- ``RTCRtpReceiver.__rtcp_ssrc`` and ``RTCDtlsTransport._send_rtp``: our receive path sends its
  own (wrap-safe) RTCP NACKs.
- ``RTCRtpSender.__mid`` / ``__ntp_timestamp`` / ``__rtp_timestamp`` / ``__octet_count`` /
  ``__packet_count``, ``RTCDtlsTransport._tx_srtp`` and aioice ``Connection._nominated``: the
  batch send path builds, protects and sends RTP itself and keeps aiortc's SR counters right.
- ``aiortc.rtcrtpsender.random_sequence_number`` (TEST ONLY, ``fixed_start_sequence``): start a
  stream just below the 65535 -> 0 wrap.
- pylibsrtp ``Session._srtp`` / ``_cdata`` / ``_buffer`` and ``pylibsrtp._binding``: the batch
  path calls libsrtp's ``srtp_protect`` on the session's own buffer (``srtp_protector``).
- ``RTCDtlsTransport._ssl`` / ``_role`` / ``_data_receiver``: ``release_dtls`` swaps the pyOpenSSL
  connection of an established DTLS 1.2 client for a small stand-in (≈100 KB per session).
- aioice ``Connection._check_list`` (through ``RTCIceTransport._connection``) and our own
  instance-level wrappers (``RTCDtlsTransport._handle_rtcp_data`` / ``_send_rtp``,
  ``RTCRtpReceiver._handle_rtp_packet``): ``release_peer_connection`` cuts a closed peer
  connection's reference cycles (session/teardown.py).
- ``aioice.ice.CONSENT_INTERVAL`` / ``CONSENT_FAILURES`` (TEST ONLY, ``consent_timing``): a
  short ICE consent freshness timeout, so tests see a vanished peer reaped in seconds.
- aioice ``Connection._local_username`` / ``_local_password`` / ``_remote_candidates_end``:
  ``restart_ice`` (WHEP's ICE restart; aiortc has none) gives the live ICE connection new
  credentials on both sides in place: its sockets, candidates and nominated pair carry on, DTLS
  and SRTP are untouched.
- aioice ``Connection.query_consent`` (replaced per instance) / ``_query_consent_task`` /
  ``build_request`` / ``_nominated`` / ``remote_password``, ``StunProtocol.transactions`` /
  ``transport``: ``tolerate_late_consent`` keeps RFC 7675 consent freshness with checks that
  may be answered late (aioice: within 0.5 s).
- aioice ``Connection._closing`` / ``_early_checks_done`` / ``_nominated`` / ``_protocols`` /
  ``_valid_username`` / ``ice_controlling`` / ``local_password``, ``CandidatePair.protocol`` /
  ``remote_addr`` / ``state``: ``answer_consent_directly`` (consent_answer.py) lets the shared
  socket answer a connected peer's plain consent checks from their bytes, as aioice's
  ``request_received`` would (anything else still goes to aioice).
- ``RTCPeerConnection.__iceTransports``, aioice ``Connection.get_component_candidates`` (replaced
  per instance) / ``_protocols`` / ``_local_username`` / ``stun_server``, ``StunProtocol``
  (``connection_made``, ``transactions``, ``local_candidate``), ``aioice.candidate``'s
  ``Candidate`` / ``candidate_foundation`` / ``candidate_priority`` and
  ``aioice.ice.server_reflexive_candidate``: ``share_udp_socket`` gathers a server session's
  host candidates on the worker's shared UDP socket (gateway/net/udp_mux.py) instead of one
  socket per session; ``restart_ice`` then registers the new ufrag with it.
- ``RTCRtpSender.__rtp_started`` / ``__rtp_exited`` / ``__rtcp_started`` / ``__rtcp_exited``,
  ``RTCRtpReceiver.__rtcp_started`` / ``__rtcp_exited``, ``RTCIceTransport.__start``:
  ``lazy_events`` makes them lazy Events in place (≈ 4 KB a session); ``RTCRtpReceiver.__started`` /
  ``__decoder_queue`` / ``__decoder_error`` and ``receive`` (wrapped once): a never-started
  receiver's decoder queue is dropped and remade if it ever starts (≈ 5 KB); aioice
  ``Connection._check_list_state`` / ``_queue``: slimmed by the caller's ``slim_queue``,
  ``_early_checks`` / ``_early_checks_done``: the deque dropped once ``connect`` ran them;
  ``RTCPeerConnection.__certificates``: ``share_certificate`` gives every session the process's
  DTLS certificate (≈ 6.4 KB of OpenSSL memory a session); ``RTCPeerConnection.
  __currentLocalDescription`` / ``__currentRemoteDescription`` (read by ``__localDescription``
  / ``__remoteDescription``): ``pack_descriptions`` keeps them as compressed pickles until read
  (descriptions.py: ≈ 20-26 KB of parsed SDP a session).
- ``RTCRtpSender._run_rtcp`` (replaced per instance before aiortc starts the sender),
  ``_send_rtcp``, ``_ssrc``, ``__cname``, the SR counters, ``__lsr`` / ``__lsr_time``,
  ``__rtcp_started`` / ``__rtcp_exited``: ``park_sender_reports`` / ``sender_report``
  (``reports``): a session's sender reports leave from the shared tick, not from a task.
- ``RTCDtlsTransport._rx_srtp`` / ``_state`` / ``_transport`` / ``_rtp_router`` /
  ``_rtp_header_extensions_map`` / ``__rx_bytes`` / ``__rx_packets``, aioice
  ``Connection._queue``, ``RTCRtpReceiver._enabled`` / ``__kind`` / ``__codecs`` /
  ``__remote_streams`` / ``__active_ssrc`` / ``__nack_generator`` /
  ``__remote_bitrate_estimator``, ``aiortc.rtcrtpreceiver.StreamStatistics``:
  ``receive_rtp_directly`` (rx_fast.py) takes a connected talker's SRTP RTP from the shared
  socket's read loop and does what aiortc's receive task would have done with it;
  ``receive_rtcp_directly`` (rtcp_fast.py) does the same for a connected session's SRTCP
  (``unprotect_rtcp``, ``_handle_rtcp_data`` run from the read loop).
"""

from __future__ import annotations

import aioice.ice
import aiortc.rtcdtlstransport
import aiortc.rtcrtpsender
import pylibsrtp
from aiortc import RTCDtlsTransport, RTCRtpReceiver, RTCRtpSender

from gateway.aiortc_compat.consent import *  # noqa: F403
from gateway.aiortc_compat.consent import _consent_problems
from gateway.aiortc_compat.consent_answer import (  # noqa: F401
    ANSWERS,
    _consent_answer_problems,
    answer_consent_directly,
)
from gateway.aiortc_compat.descriptions import (  # noqa: F401
    PackedDescription,
    _descriptions_problems,
    pack_descriptions,
)
from gateway.aiortc_compat.dtls import *  # noqa: F403
from gateway.aiortc_compat.dtls import _srtp_sender_problems
from gateway.aiortc_compat.ice import *  # noqa: F403
from gateway.aiortc_compat.ice import (
    _check_pacing_problems,
    _mux_problems,
)
from gateway.aiortc_compat.ice import (
    _original_get_host_addresses as _original_get_host_addresses,
)
from gateway.aiortc_compat.memory import _memory_problems, lazy_events, share_certificate  # noqa: F401
from gateway.aiortc_compat.reports import (  # noqa: F401
    _report_problems,
    aiortc_sender_report,
    park_sender_reports,
    sender_report,
    unpark_sender_reports,
)
from gateway.aiortc_compat.rtcp_fast import (  # noqa: F401
    FastRtcpStats,
    _rtcp_fast_problems,
    fast_rtcp_refusal,
    receive_rtcp_directly,
)
from gateway.aiortc_compat.rtp_taps import *  # noqa: F403
from gateway.aiortc_compat.rtp_taps import _receiver_rtcp_problems
from gateway.aiortc_compat.rx_fast import *  # noqa: F403
from gateway.aiortc_compat.rx_fast import _rx_fast_problems
from gateway.aiortc_compat.sender import *  # noqa: F403
from gateway.aiortc_compat.sender import _nominated_problems
from gateway.aiortc_compat.teardown import *  # noqa: F403
from gateway.aiortc_compat.teardown import _teardown_problems


def check_internals() -> list[str]:
    """Names this module relies on that the installed aiortc/aioice no longer provide."""
    problems: list[str] = []
    if not isinstance(getattr(aiortc.rtcrtpsender, "RTP_HISTORY_SIZE", None), int):
        problems.append("aiortc.rtcrtpsender.RTP_HISTORY_SIZE")
    for name in ("_retransmit", "_run_rtp", "_next_encoded_frame"):
        if not callable(getattr(RTCRtpSender, name, None)):
            problems.append(f"RTCRtpSender.{name}")
    for name in ("_handle_rtp_packet",):
        if not callable(getattr(RTCRtpReceiver, name, None)):
            problems.append(f"RTCRtpReceiver.{name}")
    for name in ("_handle_rtcp_data", "_send_rtp", "_recv_next", "_write_ssl"):
        if not callable(getattr(RTCDtlsTransport, name, None)):
            problems.append(f"RTCDtlsTransport.{name}")
    for name in ("data_received", "sendto"):
        if not callable(getattr(aioice.ice.Connection, name, None)):
            problems.append(f"aioice.Connection.{name}")
    if not callable(getattr(aioice.ice, "get_host_addresses", None)):
        problems.append("aioice.ice.get_host_addresses")
    if not hasattr(getattr(aiortc.rtcdtlstransport, "State", None), "CONNECTED"):
        problems.append("aiortc.rtcdtlstransport.State.CONNECTED")
    if not isinstance(getattr(aioice.ice, "StunProtocol", None), type):
        problems.append("aioice.ice.StunProtocol")
    probe = aioice.ice.Connection(ice_controlling=False)
    for name in ("_local_username", "_local_password", "_remote_candidates_end", "_nominated"):
        if not hasattr(probe, name):
            problems.append(f"aioice.Connection.{name}")
    problems.extend(_receiver_rtcp_problems())
    problems.extend(_report_problems())
    problems.extend(_teardown_problems())
    problems.extend(_memory_problems())
    problems.extend(_descriptions_problems())
    problems.extend(_mux_problems())
    problems.extend(_consent_problems())
    problems.extend(_consent_answer_problems())
    problems.extend(_check_pacing_problems())
    problems.extend(_rx_fast_problems())
    problems.extend(_rtcp_fast_problems())
    problems.extend(_nominated_problems())
    problems.extend(_srtp_sender_problems())
    if not hasattr(pylibsrtp, "_binding") or not hasattr(pylibsrtp, "SRTP_MAX_TRAILER_LEN"):
        problems.append("pylibsrtp._binding / SRTP_MAX_TRAILER_LEN")
    return problems

