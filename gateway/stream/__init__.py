"""The HTTP streaming path's pure building blocks: no sockets, no event loop, no clock.

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

Layer: a leaf. May import only ``gateway.media`` (codec constants), the standard library, av,
numpy and pydantic.
"""
