"""The media path: PCM -> 24 kHz -> 20 ms frames -> Opus -> frame store -> paced RTP."""
