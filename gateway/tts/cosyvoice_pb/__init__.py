"""Generated protobuf/gRPC stubs for CosyVoice's ``cosyvoice.proto`` (committed, do not edit).

``cosyvoice.proto`` is FunAudioLLM/CosyVoice ``runtime/python/grpc/cosyvoice.proto`` verbatim
(Apache-2.0). Regenerate after changing grpcio-tools or the proto with::

    python -m gateway.tts.cosyvoice_pb
"""
