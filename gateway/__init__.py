"""Real-time TTS voice gateway: 24 kHz Opus frames passed unchanged into WebRTC RTP."""

__version__ = "0.1.0"
