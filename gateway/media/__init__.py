"""The media path: PCM -> 24 kHz -> 20 ms frames -> Opus -> fan-out to sinks -> frame store ->
paced RTP.

Layer: below receive. May import rtp, runtime and aiortc_compat.
"""
