"""The receive path as a component: jitter buffer, loss tracking, NACK generation, Opus
FEC/PLC decoding and playout. Used by the headless client and (next) the gateway's uplink.

Layer: below tts/speech. May import media, rtp, runtime.
"""
