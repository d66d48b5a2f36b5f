"""The media path's transport-free parts: PCM -> 24 kHz (resample) -> 20 ms frames (framer) ->
Opus, once (opus_codec) -> fan-out to sinks (fanout, frame_queue), the ``AudioSink`` interface
and the one definition of heard (sink), the shared ticker every paced sink runs on (ticker).
The transports' send sides are gateway.webrtc and gateway.http.

Layer: below nack. May import rtp, runtime and aiortc_compat.
"""
