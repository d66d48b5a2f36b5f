"""The headless aiortc client (CLI and peer): plays the gateway through ``gateway.receive``.

Layer: top. May import anything below it.
"""
