"""The OpenAI Realtime API on top of the duplex loop: one more front door to our sessions.

``protocol`` parses and checks client events and builds server events; ``engine`` is the
transport-free state machine of one Realtime session (conversation items, the input audio,
client events), composed with ``responder`` (a response's lifecycle), ``audio_deltas`` (its
audio as paced deltas over a WebSocket), ``input_buffer`` (the buffer a client commits) and
``agent_input`` (the items as the agent's history); ``websocket`` carries it over
``GET /v1/realtime``; ``routes`` registers each connection as a session of ours (the
registry's caps, drain, ``/v1/sessions/{id}``).
See docs/realtime.md for what is supported.
"""
