"""A session's send-side media pipeline without a peer connection, for tests that drive it.

speaker -> fan-out -> the RTP sink's queue (a BLOCK sink, as a WebRTC leg attaches it) -> the
passthrough track (pulled by the test, as aiortc's sender would) -> the frame store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import av

from gateway.media.fanout import FrameFanout, SinkPolicy
from gateway.media.frame_queue import FrameQueue
from gateway.media.opus_codec import EncoderSettings, silence_packet
from gateway.media.ticker import Ticker
from gateway.nack.store import FrameStore
from gateway.speech.speaker import Speaker
from gateway.webrtc.pacer import PacingClock
from gateway.webrtc.rtp_sink import RtpSink
from tests.aiortc_track import PassthroughOpusTrack


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


class InlinePool:
    """An encoder pool that encodes on the loop, at once (deterministic tests)."""

    async def run(self, fn: Any, *args: Any) -> Any:
        return fn(*args)


async def play_out(queue: FrameQueue, store: FrameStore, utterance: Any,
                   seqs: Iterator[int]) -> list[bytes]:
    """The send side: pop every frame into the store until the utterance is done; the
    utterance's payloads sent (keep-alive silence left out)."""
    sent = []
    while not utterance.finished.is_set():
        frame = queue.pop()
        if frame is None:
            await asyncio.sleep(0)  # one loop turn for the producer task, not a timed wait
            continue
        seq = next(seqs)
        store.record_sent(seq & 0xFFFF, seq * 960, frame.payload, frame.owner, frame.index)
        if frame.owner is not None:
            sent.append(frame.payload)
    return sent
