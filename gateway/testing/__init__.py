"""Test helpers: stand-in servers that speak upstream protocols on loopback, seeded in-process
network impairment.

Layer: beside api (used by tests, benches and the client). May import tts, media, rtp, runtime and
aiortc_compat.
"""
