"""When the reply first became audible: a ``ReceivePath.pcm`` frame callback.

The first played frame (after ``since``) louder than ``threshold_dbfs`` (-45 dBFS, as the raw
capture's ``first_audible``) is kept; with the arrival time of its packet this gives both
"request -> first audible packet" and "request -> first audible frame played".
"""

from __future__ import annotations

from gateway.client.capture import frame_rms_dbfs
from gateway.receive.frame_decoder import FrameKind
from gateway.receive.pcm_source import PcmFrame

_NOT_AUDIO = (FrameKind.UNDERRUN, FrameKind.INSERTED)


class FirstAudible:
    def __init__(self, threshold_dbfs: float = -45.0, since: float | None = None) -> None:
        self.threshold_dbfs = threshold_dbfs
        self.since = since  # frames played before this time are not the reply
        self.frame: PcmFrame | None = None

    def __call__(self, frame: PcmFrame) -> None:
        if self.frame is not None or frame.kind in _NOT_AUDIO:
            return
        if self.since is not None and frame.at < self.since:
            return
        if frame_rms_dbfs(frame.pcm) > self.threshold_dbfs:
            self.frame = frame

    def played_ms(self, start: float) -> float | None:
        """Milliseconds from ``start`` to the first audible frame's playout."""
        return None if self.frame is None else round((self.frame.at - start) * 1000, 1)
