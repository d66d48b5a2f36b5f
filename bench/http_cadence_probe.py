"""Experiment (not a product path): the gateway with a coarser write cadence for live streams.

    BENCH_LIVE_WRITE_MS=100 python -m bench.http_cadence_probe --port P --voice ...  (gateway args)

Runs ``python -m gateway`` unchanged except for ``HttpStreamLeg.run`` (gateway/session/
http_leg.py), replaced here by a copy that differs in one condition: a live stream still
wakes when its next frame is due (``i * 20 ms - lead`` after the first), but then writes every
queued frame due within the next ``BENCH_LIVE_WRITE_MS`` (up to the flush size) in one write.
Frames only ever go out early, never late: the listener holds lead .. lead + cadence of audio
instead of lead, and a stream costs 1000 / cadence writes and wake-ups a second instead of 50.
With BENCH_LIVE_WRITE_MS=0 it behaves as the gateway does. bench/http_stream.py's
``--cadence-probe 0,60,100`` runs the density load against it, to show what the change buys.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable

from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.media.ticker import shared_ticker
from gateway.session import http_leg
from gateway.speech.utterance import Utterance, UtteranceState

CADENCE_S = float(os.environ.get("BENCH_LIVE_WRITE_MS", "0")) / 1000


async def run(
    self: http_leg.HttpStreamLeg, utterance: Utterance, write: Callable[[bytes], Awaitable[None]]
) -> None:
    formatter, queue, stats = self.formatter, self.queue, self.stats
    await self._write(write, formatter.start(), count=False)
    finished = utterance.finished
    ticker = shared_ticker()
    first_at: float | None = None
    index = 0
    live = self.options.pace == "live"
    lead = self.options.lead_s
    while True:
        if not len(queue):
            if finished.is_set():
                break
            ready = asyncio.ensure_future(queue.wait_ready())
            ended = asyncio.ensure_future(finished.wait())
            try:
                await asyncio.wait({ready, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ready.cancel()
                ended.cancel()
            continue
        now = time.monotonic()
        if live and first_at is not None:
            due = first_at + index * http_leg.FRAME_S - lead
            if due > now:
                await ticker.sleep(due - now)
                continue
        chunk = bytearray()
        while len(queue):
            if live and first_at is not None:  # the one change: "+ CADENCE_S"
                if first_at + index * http_leg.FRAME_S - lead > now + CADENCE_S:
                    break
            fields = queue.pop_fields()
            assert fields is not None
            payload, owner, frame_index = fields
            chunk += formatter.frame(payload)
            if first_at is None:
                first_at = now
            if owner is not None:
                owner.on_frame_sent(frame_index, index & 0xFFFF, index * RTP_TICKS_PER_FRAME, now)
            index += 1
            stats.frames += 1
            if stats.writes == 0 or len(chunk) >= self.flush_limit:
                break
        await self._write(write, bytes(chunk))
    if utterance.state is UtteranceState.FAILED:
        await self._write(write, formatter.error("synthesis_failed", utterance.error or ""))
    else:
        await self._write(write, formatter.end())


if __name__ == "__main__":  # patched only in the probe's own process
    from gateway.cli import main

    http_leg.HttpStreamLeg.run = run  # type: ignore[method-assign]
    sys.exit(main())
