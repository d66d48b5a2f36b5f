"""NACK, both sides, in one package (as pion/interceptor keeps it):

- ``rtcp``: RFC 4585 generic NACK coding;
- ``generator``: the receiver's policy (what to ask for, when, how often);
- ``sender``: the receiver's sending of what the generator asks for, when it is due;
- ``responder``: the sender's policy (what to resend, what is too old or too often asked);
- ``store``: the 5 s store of sent packets the responder answers from.

The wire half of the sender side (intercepting RTCP, resending through SRTP) is
``gateway.webrtc.retransmission``.

Layer: below receive and webrtc. May import media, rtp and runtime.
"""
