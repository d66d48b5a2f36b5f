"""Text on its way to speech: the incremental clause segmenter and word timings.

A low layer with no I/O: the agent, the synthesizers, the speech layer and every front door
(the speech API, the ElevenLabs-compatible socket) import it. Imports only the standard library
and numpy.
"""
