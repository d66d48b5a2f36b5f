"""Process runtime: garbage-collection policy, event-loop stall watch, bounded worker pools,
the metrics registry.

Layer: bottom (with aiortc_compat). Imports nothing else of the gateway.
"""
