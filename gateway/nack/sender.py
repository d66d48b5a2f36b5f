"""Sends what the NACK generator asks for as RTCP generic NACKs: the receive path's one task.

``wake()`` (on a gap, and on playout periods while packets are missing) lets the task poll the
generator; between wakes it also sleeps only until the generator's next request is due
(``next_due``: a retry 1.5 RTT after the last request, or the per-second cap's next token), so
retries follow the round-trip time rather than the 20 ms playout clock. Each poll that asks for
something sends one NACK (``gateway.nack.rtcp``, wrap-safe) through ``send_rtcp``, from
``sender_ssrc()`` (or a random SSRC of ours until the transport has one) to the media SSRC last
seen. A failing transport is counted, never fatal. ``close()`` cancels the task and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from gateway.nack.generator import NackGenerator
from gateway.nack.rtcp import build_nack_packet
from gateway.runtime.lazy_event import LazyEvent

log = logging.getLogger(__name__)

SendRtcp = Callable[[bytes], Awaitable[bool]]


class NackSender:
    def __init__(
        self,
        generator: NackGenerator,
        send_rtcp: SendRtcp,
        playout_seq: Callable[[], int | None],
        sender_ssrc: Callable[[], int | None] | None = None,
    ) -> None:
        self._generator = generator
        self._send_rtcp = send_rtcp
        self._playout_seq = playout_seq
        self._sender_ssrc = sender_ssrc
        self._fallback_ssrc = random.getrandbits(32)
        self._wake = LazyEvent()
        self._task: asyncio.Task[None] | None = None
        self.media_ssrc: int | None = None
        self.send_failures = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nack-sender")

    def wake(self) -> None:
        self._wake.set()

    async def _wait(self, use_due: bool) -> bool:
        """Until woken, or (``use_due``) until the generator's next request is due; True when
        the due time ended the wait."""
        due = self._generator.next_due(time.monotonic()) if use_due else None
        if due is None:
            await self._wake.wait()
            return False
        delay = due - time.monotonic()
        if delay <= 0:
            await asyncio.sleep(0)
            return True
        try:
            async with asyncio.timeout(delay):
                await self._wake.wait()
        except TimeoutError:
            return True
        return False

    async def _run(self) -> None:
        use_due = True
        while True:
            by_due = await self._wait(use_due)
            self._wake.clear()
            seqs = self._generator.poll(time.monotonic(), self._playout_seq())
            use_due = bool(seqs) or not by_due  # a due time that gave nothing: wait for a wake
            if not seqs or self.media_ssrc is None:
                continue
            sender = (self._sender_ssrc() if self._sender_ssrc else None) or self._fallback_ssrc
            packet = build_nack_packet(sender, self.media_ssrc, seqs)
            try:
                sent = await self._send_rtcp(packet)
            except Exception:  # a failing transport must not end the receive path
                log.debug("NACK send failed", exc_info=True)
                sent = False
            if not sent:
                self.send_failures += 1

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
