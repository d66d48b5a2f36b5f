"""Broadcast channels: one speaker, its frames encoded once, aired to many listeners.

See docs/channels.md: a channel's ``Air`` is the speaker's one (BLOCK) sink and the channel's
clock; every 20 ms it hands the frame on air to every listener's own bounded queue (DROP).
"""
