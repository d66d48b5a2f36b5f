"""The HTTP API (aiohttp): routes, JSON errors, the app factory.

Layer: top (below client/cli). May import session, speech, tts, runtime, config; nothing imports it
but ``gateway.cli``.
"""
