"""The ElevenLabs-compatible front door: streaming text in, audio and word alignment out.

What Pipecat's ``ElevenLabsTTSService`` and LiveKit Agents' ``elevenlabs.TTS`` speak, pointed
at the gateway (``url=ws://host:port``, ``base_url=http://host:port/v1``): the WebSockets
``stream-input`` / ``multi-stream-input`` (``socket.py``, contexts in ``context.py``) and the
HTTP routes (``http.py``), registered by ``routes.py``. Text is cut by ``gateway.text``'s
segmenter; audio comes in their ``output_format`` values (``formats.py``); word timings become
their per-character alignment (``alignment.py``); voice ids map as ``voices.py`` says.

Layer: under gateway.api (which registers the routes), over gateway.tts and gateway.text.
"""
