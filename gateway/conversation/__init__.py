"""The transport-free conversation: a speaker, its fan-out to sinks and the event stream
(``conversation``, ``events``), the duplex loop that listens back (``duplex``), the options a
session is made with (``options``) and the order things are closed in (``teardown``).

Layer: below the transports (webrtc, http). May import speech, listen, agent, tts, receive,
media, rtp and runtime.
"""
