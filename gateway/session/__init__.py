"""Sessions: a ``Session`` is an id, a conversation and its transport legs, and the registry of
live sessions (cap, idle timeout, drain).

Layer: below api and config. May import the transports (webrtc, http), conversation and
everything below them.
"""
