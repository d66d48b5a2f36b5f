"""The HTTP API (aiohttp): routes, JSON errors, access, the request models and OpenAPI document,
the app factory, the HTTP speech routes.

Layer: top (below client/cli). May import config, session, the transports and everything below;
nothing imports it but ``gateway.cli`` (and the cluster's supervisor, for the app).
"""
