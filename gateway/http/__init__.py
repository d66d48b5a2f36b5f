"""The HTTP transport: the leg (``leg``: frames to a response, live-paced or as fast as
produced), the chunked body writer (``chunked_writer``) and the stream formats.

The formats are pure building blocks: no sockets, no event loop, no clock.

Each 20 ms Opus frame the media path encoded once is written to an HTTP response the moment it
exists, in one of these shapes:

- ``ogg_opus``: the frames as Ogg/Opus pages, one page per frame (``audio/ogg``);
- ``frame_records``: the gateway's own framed binary stream (sequence, RTP-style timestamp,
  Opus bytes), with an incremental parser for the client and the page;
- ``wav``: a streamed 24 kHz mono 16-bit WAV header with open-ended sizes;
- ``transcode``: incremental PCM -> mp3 / flac / aac (and pcm / wav passthrough) encoders and
  an ``atempo`` time-stretch, for the OpenAI-compatible route's other formats;
- ``openai_speech``: the validated request model of OpenAI's ``audio.speech`` contract, the
  media type per format, and the SSE event encoders.

Layer: below session, beside webrtc. The format modules import only ``gateway.media`` (codec
constants), the standard library, av, numpy and pydantic (tests/unit/test_stream_layering.py).
"""
