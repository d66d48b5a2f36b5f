"""The WebRTC transport: one leg per peer connection and its send side.

- ``leg``: the ``WebRtcLeg`` (peer connection, its RTP sink, the microphone uplink);
- ``sdp_policy``: what we accept in an offer and pin in the answer (Opus fmtp, RED, NACK);
- ``rtp_sink``: frames in, paced RTP out, with the 5 s store for NACK answers; ``pacer``;
  ``red_sender`` (RFC 2198 from the pre-encoded frames); ``retransmission`` (answers NACKs and
  reads receiver reports from the sink's store); the two transmitters: ``batch_sender``
  (the shared UDP socket, SRTP by pylibsrtp, sendmmsg) and ``track`` (aiortc's own sender).

aiortc's private names stay in ``gateway.aiortc_compat``.

Layer: below session, beside http. May import conversation and everything below it.
"""
