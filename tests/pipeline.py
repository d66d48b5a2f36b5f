"""A session's send-side media pipeline without a peer connection, for tests that drive it.

speaker -> fan-out -> the RTP sink's queue (a BLOCK sink, as a WebRTC leg attaches it) -> the
passthrough track (pulled by the test, as aiortc's sender would) -> the frame store.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import av

from gateway.media.fanout import FrameFanout, SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.frame_store import FrameStore
from gateway.media.opus_codec import EncoderSettings, silence_packet
from gateway.media.pacer import PacingClock
from gateway.media.rtp_sink import RtpSink
from gateway.media.ticker import Ticker
from gateway.media.track import PassthroughOpusTrack
from gateway.speech.speaker import Speaker


def pipeline(
    queue_frames: int = 50,
    ticker: Ticker | None = None,
    pacer: PacingClock | None = None,
    **speaker_options: Any,
) -> tuple[Speaker, PassthroughOpusTrack]:
    queue = FrameQueue(queue_frames)
    fanout = FrameFanout()
    fanout.attach("rtp", queue, SinkPolicy.BLOCK)
    if ticker is None and pacer is None:
        pacer = PacingClock()
    sink = RtpSink(queue, FrameStore(), silence_packet(), ticker, pacer=pacer)
    speaker = Speaker(fanout, speaker_options.pop("settings", EncoderSettings()), **speaker_options)
    return speaker, PassthroughOpusTrack(sink)


def record_sent(track: PassthroughOpusTrack, seq: int, packet: av.Packet) -> None:
    """What aiortc's sender does with each packet the track returns: record it in its history."""
    track.history[seq] = SimpleNamespace(
        sequence_number=seq & 0xFFFF, timestamp=packet.pts, payload=bytes(packet),
        extensions=SimpleNamespace(abs_send_time=0),
    )
