"""RTP/RTCP protocol pieces with no I/O: 16-bit serial numbers, RFC 4585 NACK coding, the NACK
responder's policy (sender side) and the NACK generator (receiver side), side by side as
pion/interceptor keeps them.

Layer: below media. May import runtime only.
"""
