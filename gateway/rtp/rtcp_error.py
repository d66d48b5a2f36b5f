"""The one decoding error every RTCP parser here raises (NACK, SR/RR): a ``ValueError``."""

from __future__ import annotations


class MalformedRtcp(ValueError):
    """An RTCP packet (or FCI) that cannot be decoded."""
