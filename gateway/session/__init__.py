"""Sessions: the transport-free conversation, its legs (WebRTC now, HTTP next), the SDP
policy and the registry of live sessions.

Layer: below api. May import speech, tts, receive, media, rtp, runtime and aiortc_compat.
"""
