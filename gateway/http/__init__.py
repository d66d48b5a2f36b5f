"""The aiohttp signalling and control API (WHEP-style)."""
