"""Network plumbing with no aiortc or aioice in it: the shared UDP socket of a worker (one port
demultiplexed among every session's ICE/DTLS/SRTP, as mediasoup's WebRtcServer and pion's
UDPMux), the STUN header fields it routes by, and batched sending with ``sendmmsg``.

Layer: bottom (below runtime and aiortc_compat). Imports nothing else of the gateway.
"""
