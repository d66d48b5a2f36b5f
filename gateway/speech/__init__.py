"""Speech: utterances, the per-conversation speaker (text -> encoded frames into the fan-out) and
the phrase cache with its on-disk store.

Layer: below session. May import tts, media, rtp, runtime.
"""
