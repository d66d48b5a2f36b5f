"""A WebSocket session's reply audio: the speaker's frames as ``response.output_audio.delta``
events, paced at real time plus ``OUTPUT_LEAD_MS`` (the first delta at once), so a barge-in or
``response.cancel`` finds most of a long reply still on the server: cut there, no delta of it
follows. A delta carries at most ``DELTA_FRAMES`` (100 ms); frames of a response that is over
are dropped.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.media.frame_queue import FrameQueue
from gateway.realtime.outbox import Outbox
from gateway.realtime.protocol import encode_audio
from gateway.realtime.responder import Emit, Responder
from gateway.speech.utterance import Delivery, UtteranceState

OUTPUT_LEAD_MS = 500  # audio sent ahead of real time
DELTA_FRAMES = 5  # at most 100 ms of audio per delta (the first of a clause goes alone)
SINK_FRAMES = 50  # the speaker's sink: a full one holds the speaker (BLOCK)


class AudioDeltas:
    def __init__(self, outbox: Outbox, responder: Responder, emit: Emit) -> None:
        self.outbox = outbox
        self.responder = responder
        self._emit = emit
        self.sink = FrameQueue(SINK_FRAMES)
        self.lead_s = OUTPUT_LEAD_MS / 1000  # how far ahead of real time audio may be sent
        self._play_until = 0.0  # when the client has played everything sent (paced)

    async def run(self) -> None:
        """The speaker's frames -> ``response.output_audio.delta``, paced (see the module)."""
        queue = self.sink
        loop = asyncio.get_running_loop()
        while True:
            await queue.wait_ready()
            await self.outbox.wait_room()
            ahead = self._play_until - loop.time()
            if ahead > self.lead_s:
                await asyncio.sleep(ahead - self.lead_s)
                continue
            run = queue.pop_run(DELTA_FRAMES)
            if run is None:
                continue
            payloads, owner, index = run
            self.send(payloads, owner, index, loop.time())

    def send(self, payloads: list[bytes], owner: Any, index: int, now: float) -> None:
        """One delta, unless its response is over (then its frames are dropped)."""
        count = len(payloads)
        if isinstance(owner, Delivery):
            owner.on_frames_sent(index, count, 0, 0, time.monotonic())
            found = self.responder.of_utterance(owner.utterance.id)
        else:
            found = None
        if found is None:
            return
        response, clause = found
        if response.done or owner.utterance.state is UtteranceState.INTERRUPTED:
            return
        ids = {"response_id": response.id, "item_id": response.item.id,
               "output_index": response.index(response.item), "content_index": 0}
        if not clause.sent:
            self.responder.transcript_delta(response, clause)
        assert response.encoder is not None
        data = response.encoder.encode(b"".join(payloads))
        ms = count * 20.0
        clause.audio_ms += ms
        response.item.audio_ms += ms
        self._play_until = max(self._play_until, now) + ms / 1000
        self._emit("response.output_audio.delta", **ids, delta=encode_audio(data))
