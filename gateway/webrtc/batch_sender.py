"""The batch send path: RTP built and sent straight from the shared tick, no task per stream.

With aiortc's own send loop every packet costs a task wake-up and a chain of coroutines
(track.recv -> pack -> serialize -> SRTP -> ICE -> socket), ≈60-80 µs per packet measured under
load (bench/load.py). Here each stream is a tick callback: when its slot is due it pops its next
frame (or the keep-alive silence), builds the RTP packet from the stream's header template
(``RtpHeaderTemplate``: aiortc's exact bytes, three fields patched), records it in the frame store
(so NACKs are answered exactly as on the aiortc path), protects it and hands it to the socket
(``aiortc_compat.direct_rtp_sender``: pair, socket and SRTP session looked up once), all
synchronously. aiortc's own sender stays parked on a track that never yields; its RTCP loop is
parked too (``aiortc_compat.park_sender_reports``: no task per session) and each stream sends its
sender reports from the tick (the first after 0.5-1.5 s as aiortc's, then every 2.5-7.5 s as
libwebrtc's audio: ``--rtcp-report-interval-s``), from aiortc's counters that the sends keep up
to date.

It is the transmitter of an ``RtpSink`` (webrtc/rtp_sink.py: the queue, schedule, store, silence,
stats and test-only drop are the sink's): 960-tick timestamps, marker bit set, mid and
abs-send-time extensions. (The tests also drain a sink through aiortc's own loop:
tests/aiortc_track.py.)

An exception while sending one tick's packets (an owner's callback, say) is logged and counted
(``stats.send_errors``) and the stream's next tick is scheduled all the same: one bad packet must
not end a stream silently. Without a direct socket (a TURN relay) packets take aiortc's async
path, at most ``MAX_PENDING_ASYNC`` at a time; more are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Callable
from functools import partial
from typing import Any
from weakref import ReferenceType, ref

from aiortc import RTCRtpSender
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gateway import aiortc_compat
from gateway.conversation.options import SessionOptions
from gateway.media.frames import FrameOwner
from gateway.media.opus_codec import RTP_TICKS_PER_FRAME
from gateway.media.ticker import Ticker
from gateway.net import udp_mux
from gateway.rtp.header import RtpHeaderTemplate, send_stamp
from gateway.webrtc.fed_frames import FedFrames, FeedRun
from gateway.webrtc.in_c import MAX_CATCH_UP, held_in_c, next_handle
from gateway.webrtc.rtp_sink import RtpSink, take_slot

log = logging.getLogger(__name__)
MAX_PENDING_ASYNC = 16  # sends in flight on aiortc's async path (TURN) before dropping
RTP_CLOCK_HZ = 48_000  # Opus's RTP clock, whatever the encoded rate
DTX_EVERY = 20  # idle slots per DTX packet (400 ms, as libopus/libwebrtc send them)
DTX_HANGOVER = 10  # silent frames sent after speech before DTX (200 ms, libopus's own)
# RTCP sender reports, sent from the tick instead of aiortc's task per session: the first
# after 0.5-1.5 s (as aiortc's loop: the receiver's clock mapping and our RTT early), then at
# the stream's ``report_interval_s`` (the session option's default: libwebrtc's 5 s for audio;
# aiortc's 1 s cost a thousand Python visits a second at 1,000 streams), each interval varied
# by 0.5-1.5x (RFC 3550 §6.3.1)
FIRST_REPORT_S = 1.0
REPORT_INTERVAL_S = SessionOptions().rtcp_report_interval_s
#: Every report time is rounded up to this grain and runs after its tick's sends: 1,000
#: streams' 200 reports a second go in ten batches on a warm core, not one cold visit each
#: (docs/density.md, "Consent, reports and path checks in batches")
REPORT_GRAIN_S = 0.1
EARLY_MIN_WAIT_S = 0.0025  # a first frame this close to its slot just takes the slot


def _report_if_alive(stream: ReferenceType[BatchStream]) -> None:
    alive = stream()
    if alive is not None:
        alive._on_report()


class ParkedTrack(MediaStreamTrack):
    """What aiortc's sender loop waits on while the batch path sends: nothing, until stopped."""

    kind = "audio"

    def __init__(self, on_sender_started: Callable[[], None]) -> None:
        super().__init__()
        self._stopped: asyncio.Future[None] | None = None
        self._on_sender_started: Callable[[], None] | None = on_sender_started

    async def recv(self) -> None:  # type: ignore[override]
        if self.readyState != "live":
            raise MediaStreamError
        # aiortc calls recv() from the send loop it starts once the sender is configured
        # (mid, header extensions): the moment the batch path can take over.
        started, self._on_sender_started = self._on_sender_started, None
        if started is not None:
            started()
        self._stopped = asyncio.get_running_loop().create_future()
        with contextlib.suppress(asyncio.CancelledError):
            await self._stopped
        raise MediaStreamError

    def stop(self) -> None:
        super().stop()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)


class BatchStream:
    """One session's paced stream on the batch path: the tick-driven transmitter of a sink."""

    # Slots: at hundreds of streams the per-packet cost is mostly cache misses over each
    # stream's objects; the sink's parts are referenced from here, one less hop per access.
    __slots__ = (
        "__weakref__",
        "_compiled",
        "_direct",
        "_direct_rtcp",
        "_dtx_payload",
        "_fed",
        "_handle",
        "_header",
        "_idle_slots",
        "_in_c",
        "_last_error",
        "_last_slot_empty",
        "_marker_header",
        "_pending_sends",
        "_red_header",
        "_running",
        "_sender",
        "_seq",
        "_ts_origin",
        "dtx",
        "early_first_frame",
        "early_sends",
        "handovers",
        "in_c_allowed",
        "pacer",
        "queue",
        "report_interval_s",
        "silence",
        "sink",
        "stats",
        "store",
        "ticker",
    )

    def __init__(self, sink: RtpSink, dtx: bool = False, early_first_frame: bool = False) -> None:
        """``dtx``: between utterances send Opus DTX (after DTX_HANGOVER silent frames, a
        1-byte packet -- the silence frame's TOC, no frame -- every ``DTX_EVERY`` slots)
        instead of a silent frame every slot, the
        marker bit set on the first packet of each talkspurt (RFC 3551 §4.1; without DTX every
        packet carries it, as aiortc's own packetizer sets it). ``early_first_frame``: a frame
        reaching an idle DTX stream's empty queue is sent on the next tick of the grid, not in the
        stream's next 20 ms slot: the last (empty) slot is taken back, the schedule restarts
        there and the RTP clock moves with it (without DTX it changes nothing: see
        ``_on_wake``)."""
        if sink.ticker is None:
            raise ValueError("the batch path runs on a sink's ticker")
        self.sink = sink
        self.queue = sink.queue
        self.store = sink.store
        self.ticker: Ticker = sink.ticker
        self.pacer = sink.pacer
        self.stats = sink.stats
        self.silence = sink.silence
        self._running = False
        self._sender: RTCRtpSender | None = None
        self._seq = aiortc_compat.first_sequence_number()
        self._ts_origin = random.randint(0, 0xFFFFFFFF)
        self._pending_sends: set[asyncio.Task[None]] = set()
        self._last_error: str | None = None
        self.dtx = dtx
        self.early_first_frame = early_first_frame
        self.early_sends = 0  # first frames sent before their slot (early_first_frame)
        self._idle_slots = 0  # slots since the last queued frame was sent (0: speaking)
        self._last_slot_empty = False  # DTX: the last slot released sent no packet
        self._dtx_payload = sink.silence[:1]  # TOC only: a zero-length frame (DTX, RFC 6716)
        self._marker_header: RtpHeaderTemplate | None = None
        #: let C send the stream (``_to_c``); False: every slot from this tick
        #: (``--no-send-in-c``: to compare)
        self.in_c_allowed = True
        #: sender reports' mean interval after the first (``--rtcp-report-interval-s``)
        self.report_interval_s = REPORT_INTERVAL_S
        #: (batch, socket, its feed) while in C (``aiortc_compat.compiled_rtp_sender``'s park)
        self._in_c: tuple[Any, udp_mux.UdpMux, FeedRun] | None = None
        self._handle = 0  # its name in C's list of streams to visit
        self._fed: FedFrames | None = None  # the frames C was fed ahead (made at the first _to_c)
        self.handovers = 0  # times the stream was handed to C

    def start(self, sender: RTCRtpSender, payload_type: int) -> None:
        """Begin sending (call once the peer connection is connected and the sender started)."""
        if self._running:
            return
        self._sender = sender
        mid, extensions = aiortc_compat.sender_rtp_context(sender)
        marker = 0 if self.dtx else 1
        self._header = RtpHeaderTemplate.from_aiortc(
            payload_type, aiortc_compat.sender_ssrc(sender), extensions, mid, marker=marker
        )
        if self.dtx:  # the first packet of a talkspurt
            self._marker_header = RtpHeaderTemplate.from_aiortc(
                payload_type, aiortc_compat.sender_ssrc(sender), extensions, mid, marker=1
            )
        self.store.header = self._header  # NACKed packets are rebuilt from it
        self.store.silence = self.silence  # ... and the silence C sends
        self.store.dtx = self._dtx_payload  # ... and its DTX packets
        self._red_header = None
        if self.sink.red is not None:
            self._red_header = self.store.red_header = RtpHeaderTemplate.from_aiortc(
                self.sink.red.red_pt, aiortc_compat.sender_ssrc(sender), extensions, mid
            )
            self.store.red_opus_pt = self.sink.red.opus_pt
        self._direct = aiortc_compat.direct_rtp_sender(sender.transport)
        self._direct_rtcp = aiortc_compat.direct_rtp_sender(sender.transport, rtcp=True)
        self._compiled = self._compiled_sender(sender)
        # the streams C sends, then the tick's packets leave together
        self.ticker.after_each_tick(held_in_c(self.ticker).end_of_tick)
        self._running = True
        self.queue.on_wake = self._on_wake  # (both held until ``stop``)
        self.queue.on_take_back = self._take_back_fed
        self._schedule()
        self._schedule_report(FIRST_REPORT_S)

    def _compiled_sender(
        self, sender: RTCRtpSender
    ) -> Callable[[int, int, int, int, int, bytes], bool] | None:
        """The compiled send path (net/sendpath.py) for this stream, where the shared socket
        has it and every header variant (marker, RED) differs from the base only in its second
        octet (marker bit, payload type): that octet is patched per packet."""
        header = self._header
        for other in (self._marker_header, self._red_header):
            if other is not None and (other.raw[:1] + other.raw[2:]
                                      != header.raw[:1] + header.raw[2:]):
                return None
        return aiortc_compat.compiled_rtp_sender(sender, header.raw, header.ast_at)

    @property
    def send_path(self) -> str:
        """``compiled`` or ``python``: how this stream's packets are protected and sent."""
        return "compiled" if self._compiled is not None else "python"

    def stop(self) -> None:
        self._running = False
        self.queue.on_wake = None
        self.queue.on_take_back = None
        if self._in_c is not None:
            self._from_c()
        for task in self._pending_sends:
            task.cancel()

    @property
    def last_error(self) -> str | None:
        return self._last_error

    async def _send_async(self, data: bytes) -> None:
        assert self._sender is not None
        with contextlib.suppress(ConnectionError):
            await aiortc_compat.send_unprotected(self._sender.transport, data)

    def _schedule(self) -> None:
        # a bound method made per slot: one kept on self would be a cycle (self -> method -> self)
        # and a closed stream would wait for a full collection (tests/test_soak.py)
        self.ticker.call_at(self.pacer.deadline(), self._on_tick)

    def _schedule_report(self, mean_s: float | None = None) -> None:
        # aiortc's own RTCP loop is parked (``aiortc_compat.park_sender_reports``): a task per
        # session waking every second through an await chain, here a tick callback. Held
        # weakly: a tick seconds away must not keep a closed session alive (it is freed
        # by refcounting the moment it closes: tests/test_soak.py).
        delay = (mean_s or self.report_interval_s) * (0.5 + random.random())
        due = math.ceil((self.ticker.now() + delay) / REPORT_GRAIN_S) * REPORT_GRAIN_S
        self.ticker.call_after_sends(due, partial(_report_if_alive, ref(self)))

    def _on_report(self) -> None:
        """The stream's RTCP sender report (+ SDES), from aiortc's counters that the sends
        keep (``note_rtp_sent``; the compiled path's, kept in C, added first), leaving with
        the tick. A stream C sends stays there (what takes it back: ``_to_c``)."""
        if not self._running:
            return
        try:
            sender = self._sender
            assert sender is not None
            if self._compiled is not None:
                self._compiled.sync()  # type: ignore[attr-defined]  # C's counters to aiortc
            self._transmit(aiortc_compat.sender_report(sender), sender, self._direct_rtcp)
            self.stats.sender_reports += 1
        except Exception as exc:
            self.failed(exc)
        finally:
            if self._running:
                self._schedule_report()

    def _on_tick(self) -> None:
        # Per packet: this call, the pacer's one call for every due slot, the queue's pop,
        # ``_emit`` (the compiled stager, the store's record and its owner's callback) and the
        # re-arm. ``take_slot``'s accounting is inlined here rather than a chain of small calls
        # (docs/density.md, "Fewer calls per packet").
        if not self._running:
            return
        pacer = self.pacer
        due: float | None = None
        try:
            now = pacer.clock()  # one clock reading for all of this stream's work
            ticker = self.ticker
            stamp = ticker.tick_stamp  # one send time for all of the tick's packets
            if stamp is None:
                stamp = send_stamp()
                if ticker.firing:
                    ticker.tick_stamp = stamp
            ntp, ast, ast_bytes = stamp
            # every due slot released at once: a packet that raises still used its slot
            slots, due = pacer.release_due(now, MAX_CATCH_UP)
            queue, stats, dtx = self.queue, self.stats, self.dtx
            for slot in slots:
                try:
                    if dtx and not len(queue):
                        self._idle_slot(slot, now, ntp, ast, ast_bytes)
                        continue
                    fields = queue.pop_fields()
                    if not stats.frames_sent:
                        stats.first_sent_at = now
                    stats.frames_sent += 1
                    header = self._header
                    if fields is None:  # keep-alive silence (no DTX)
                        payload = self.silence
                        stats.silence_frames += 1
                        stats.bytes_sent += len(payload)
                        self._idle_slots += 1
                        self._emit(payload, None, 0, slot, now, ntp, ast, ast_bytes, header)
                        continue
                    payload, owner, index = fields
                    stats.speech_frames += 1
                    stats.bytes_sent += len(payload)
                    if self._idle_slots:  # a talkspurt starts
                        self._idle_slots = 0
                        header = self._marker_header or header  # (DTX only: else all have M)
                    self._emit(payload, owner, index, slot, now, ntp, ast, ast_bytes, header)
                except Exception as exc:  # this packet's; the tick's other slots still go
                    self.failed(exc)
        except Exception as exc:
            self.failed(exc)
            due = None
        finally:
            if self._running and not (self.in_c_allowed and self._handed_to_c()):
                # a bound method made per slot: one kept on self would be a cycle (self ->
                # method -> self) and a closed stream would wait for a full collection
                self.ticker.call_at(pacer.deadline() if due is None else due, self._on_tick)

    def _handed_to_c(self) -> bool:
        try:
            return self._to_c()
        except Exception as exc:  # (the stream stays on the tick)
            self.failed(exc)
            return False

    def _to_c(self) -> bool:
        """Hand the stream to C (docs/density.md, "A stream sent from C", "Speech fed
        ahead"): the compiled path's ``gw_run_parked`` releases its slots from the end of each
        tick as this tick would, each carrying the next frame it was fed (``_feed``: up to
        ``sendpath.FED_SLOTS`` from the queue, ahead) or the keep-alive silence, protects and
        stages it and records it in the store's ring; when its fed frames run low (or a new
        owner's first went), ``sent_from_c`` does the rest of ``_emit`` for the frames sent
        (the store's refs, the owners told, the counters) and feeds more. RED is C's too
        (``_red_to_c``: each packet RED while it is on, as ``RedSender.wrap`` makes it). Taken
        back (``_from_c``) for a reader of its counters (``settle``), another pair nominated
        (``aiortc_compat.NominatedPairs``), a transport or socket closed (checked every
        second: ``in_c.HeldInC.check_some``), and ``stop``; its sender reports leave it in C.
        DTX is C's too (``gw_dtx_set``: its idle slots as ``_idle_slot`` sends them), but not
        with RED on (a DTX stream's RED stays the tick's), and a frame waking an idle DTX
        stream early (``_on_wake``) takes it back. Only a compiled stream without test loss.
        True: the tick chain stops here."""
        compiled, pacer = self._compiled, self.pacer
        if compiled is None or self.sink.drop_first_tx is not None or self._dtx_red_on():
            return False
        ticker = self.ticker
        origin, slot = pacer.handover()
        times = (origin, pacer.period, pacer.max_lateness, ticker.time_of(0), ticker.period)
        handle = next_handle()
        in_c = compiled.park(  # type: ignore[attr-defined]
            times, slot, self._seq, self._ts_origin, self._header.second_byte,
            self.store.ring, self.silence, handle, ref(self),
        )
        if in_c is None:
            return False
        if self.dtx and not compiled.dtx_set(  # type: ignore[attr-defined]
            in_c, self._idle_slots, self._last_slot_empty,
            (self._marker_header or self._header).second_byte, DTX_HANGOVER, DTX_EVERY,
            self._dtx_payload,
        ):
            compiled.unpark(in_c)  # type: ignore[attr-defined]
            return False
        self._in_c, self._handle = in_c, handle
        if self._fed is None:
            self._fed = FedFrames()
        # (weakly: the store would otherwise keep the stream, a cycle, until it leaves C; one
        # plain weak reference an object, which CPython shares between its takers)
        self.store.before_read = ref(self)
        self.handovers += 1
        held_in_c(ticker).add(handle, self, in_c)
        if self.sink.red is not None:
            self._red_to_c()
        self._feed()
        return True

    def red_changed(self) -> None:
        """RED's state moved (reported loss: ``Retransmitter.on_red_changed``): a stream C
        sends gets it there."""
        if self._in_c is not None:
            if self._dtx_red_on():
                self.back_to_tick()
                return
            try:
                self._red_to_c()
            except Exception as exc:  # (back to the tick, whose packets go through ``wrap``)
                self.failed(exc)
                self.back_to_tick()

    def _dtx_red_on(self) -> bool:
        """A DTX stream whose RED is on: the tick's (C makes no RED of its idle packets)."""
        red = self.sink.red
        return self.dtx and red is not None and red.active(self.pacer.clock())

    def _red_to_c(self) -> None:
        """RED's state to C (``CompiledBatch.red_set``); where that turns it on there, the
        packets before the next from the store, whose last ``max_distance`` C keeps as its
        history from then on (``red_fill``)."""
        red, in_c, compiled, header = self.sink.red, self._in_c, self._compiled, self._red_header
        if red is None or in_c is None or compiled is None or header is None:
            return
        if compiled.red_set(  # type: ignore[attr-defined]
            in_c, header.second_byte, red.opus_pt, red.state(), self.pacer.clock()
        ):
            compiled.red_fill(  # type: ignore[attr-defined]
                in_c, red.max_distance, self.store.last_sent(red.max_distance)
            )

    def _feed(self) -> None:
        """Feed C the queue's next frames (up to ``sendpath.FED_SLOTS`` ahead); one C does not
        take (longer than ``sendpath.FEED_MAX``) is back at the queue's front and goes from
        the tick."""
        in_c, fed = self._in_c, self._fed
        if in_c is not None and fed is not None and not fed.feed(self.queue, in_c[2]):
            self.back_to_tick()

    def sent_from_c(self, now: float) -> None:
        """C asks for the stream (its fed frames low, or a new owner's first sent): the frames
        it sent recorded (``_emit``'s part after the send), the queue's producer refilled if
        that made it room (a phrase-cache replay's ``FanoutFeed``: here, not in a
        ``call_soon`` of its own), and more fed."""
        refill = self.record_from_c(now, refill_here=True)
        if refill is not None:
            try:
                refill()
            except Exception as exc:  # the producer's, as its call_soon would have reported
                asyncio.get_running_loop().call_exception_handler({
                    "message": "a queue's producer failed refilling it", "exception": exc})
        self._feed()

    def path_moved(self) -> None:
        """Another pair was nominated (``aiortc_compat.NominatedPairs``): back to the tick,
        whose sends take the new path."""
        self.back_to_tick()

    def record_from_c(self, now: float | None = None, refill_here: bool = False
                      ) -> Callable[[], None] | None:
        """The fed frames C sent since the last time, recorded: the store's refs, their owners
        told, the counters (also before the store is read: ``before_read``).
        ``refill_here``: the queue's producer callback the room made is due (if any) is
        returned for the caller to run (``FrameQueue.sent_ahead``'s ``hand_back``), not
        scheduled."""
        in_c, fed = self._in_c, self._fed
        if in_c is None or fed is None:
            return None
        count, seq = self._compiled.take_sent(in_c)  # type: ignore[union-attr]
        if not count:
            return None
        stats = self.stats
        stats.frames_sent += count
        stats.speech_frames += count
        self._idle_slots = 0
        queue = self.queue
        # (room made first, as ``fed.sent`` does: what the owners' callbacks queue finds it)
        refill = queue.sent_ahead(count, hand_back=True) if refill_here else None
        try:
            octets, error = fed.sent(count, seq, self.pacer.clock() if now is None else now,
                                     queue, self.store, not refill_here)
        except BaseException:
            if refill is not None:  # (the producer is not left waiting: as sent_ahead does)
                asyncio.get_running_loop().call_soon(refill)
            raise
        stats.bytes_sent += octets
        if error is not None:  # an owner's failure: the stream carries on
            self.failed(error)
        return refill

    def path_still_valid(self) -> bool:
        compiled = self._compiled
        return compiled is not None and compiled.still_valid()  # type: ignore[attr-defined]

    def back_to_tick(self) -> None:
        if self._in_c is not None and self._running:
            self._from_c()
            self._schedule()

    def _take_back_fed(self) -> None:
        """The queue is held or cleared (``FrameQueue.on_take_back``): what C sent is recorded
        first; the fed frames it has not sent go back to the queue's front, to be held or
        dropped with the rest."""
        in_c, fed = self._in_c, self._fed
        if in_c is None or fed is None or not fed.count:
            return
        self.record_from_c()
        self._compiled.unfeed(in_c)  # type: ignore[union-attr]
        fed.take_back(self.queue)

    def _from_c(self) -> None:
        """Take the stream back from C: the schedule, sequence number and counters as it left
        them; fed frames not sent back at the queue's front."""
        in_c, handle = self._in_c, self._handle
        compiled = self._compiled
        assert in_c is not None and compiled is not None
        self._take_back_fed()
        state = compiled.unpark(in_c)  # type: ignore[attr-defined]
        self._in_c = None
        self.store.before_read = None
        held_in_c(self.ticker).remove(handle, in_c)
        red = self.sink.red
        if red is not None:  # (what C sent: counted, and the history ``wrap`` goes on from)
            red.count_from_c(*compiled.red_take(in_c))  # type: ignore[attr-defined]
            red.restore(self.store.last_sent(red.max_distance))
        if state is None:
            return
        origin, max_late, (slot, seq, released, late, rebases, frames, octets, quiet) = state
        self.pacer.take_back(origin, slot, released, late, rebases, max_late)
        self._seq = seq
        stats = self.stats
        stats.frames_sent += frames
        stats.silence_frames += frames
        stats.bytes_sent += octets
        if self.dtx:  # (its idle slots include those that sent nothing)
            idle, empty = compiled.dtx_state(in_c)  # type: ignore[attr-defined]
            self._idle_slots, self._last_slot_empty = idle, empty
        else:
            self._idle_slots += quiet

    def settle(self) -> None:
        """Bring the counters up to date now (whoever reads them: a session's state, the
        metrics): a stream sent from C is taken back; its next tick hands it over again."""
        self.back_to_tick()

    @property
    def in_c(self) -> bool:
        """C sends its packets right now (``_to_c``)."""
        return self._in_c is not None

    def failed(self, exc: Exception) -> None:
        """Count (and log once) a failure of this stream's sending; the stream carries on."""
        self.stats.send_errors += 1
        if self._last_error is None:  # logged once per stream; counted every time
            log.exception("send tick failed (the stream carries on)")
        self._last_error = repr(exc)

    def _on_wake(self) -> None:
        """A frame reached the empty queue: on an idle DTX stream, send it now rather than in
        the next slot (``early_first_frame``). The stream's own tick chain is left as it is:
        when it fires, its slot is not due yet, and it re-arms for the next. A stream whose
        C sends (``_to_c``) is fed the frame for its next slot."""
        if not self._running:
            return
        in_c = self._in_c
        if in_c is not None:
            if not (self.dtx and self.early_first_frame
                    and all(self._compiled.dtx_state(in_c))):  # type: ignore[union-attr]
                self._feed()
                return
            self.back_to_tick()  # an idle DTX stream between packets: the frame goes early
        if not self.early_first_frame:
            return
        if not self._idle_slots or not self._last_slot_empty:
            # speaking, or the last slot carried a packet (silence, DTX): the frame keeps its
            # place in the stream
            return
        pacer = self.pacer
        now = pacer.now()
        wait = pacer.time_to_next(now)
        if 0 <= wait < EARLY_MIN_WAIT_S:
            return  # its slot is about due anyway
        if not self.dtx:
            # Sent ahead of its slot with the slot's timestamp, the frame would only wait in the
            # receiver's jitter buffer (playout follows the continuous stream's timestamps), and
            # look early: measured, nothing gained (README, latency).
            return
        # (An overdue slot -- a late tick -- is restarted the same way: it carried nothing.)
        # The last idle slot sent nothing: restart the schedule there, now, and move the RTP
        # clock with it so timestamps keep following real time (a talkspurt after DTX may
        # jump; one that fell behind real time would look late, and grow the receiver's
        # jitter buffer by the shift at every talkspurt).
        shift = pacer.reopen_last(now)
        self._ts_origin = (self._ts_origin + round(shift * RTP_CLOCK_HZ)) & 0xFFFFFFFF
        # Sent right here, from the producer's hand-over (at most a grid tick, 2.5 ms, ahead of
        # the restarted slot): a timer, even the next tick's, costs a loop wake-up and, on a
        # busy machine, several ms more.
        self._send_early()

    def _send_early(self) -> None:
        if not self._running or not len(self.queue):
            return
        try:
            now = self.pacer.now()
            ntp, ast, ast_bytes = send_stamp()
            self.early_sends += 1
            payload, owner, index, slot = take_slot(
                self.queue, self.pacer, self.stats, self.silence, now
            )
            header = self._header
            if owner is None:
                self._idle_slots += 1
            elif self._idle_slots:  # a talkspurt starts
                self._idle_slots = 0
                header = self._marker_header or header
            self._emit(payload, owner, index, slot, now, ntp, ast, ast_bytes, header)
        except Exception as exc:
            self.stats.send_errors += 1
            self._last_error = repr(exc)
            log.exception("early send failed (the stream carries on)")

    def _idle_slot(self, slot: int, now: float, ntp: int, ast: int, ast_bytes: bytes) -> None:
        """DTX: DTX_HANGOVER silent frames after speech (as libopus's own DTX waits 200 ms:
        the receiver's decoder state goes quiet, else its concealment of a DTX packet goes on
        sounding like the last speech), then a 1-byte DTX packet every DTX_EVERY slots and
        nothing in between."""
        idle = self._idle_slots
        self._idle_slots = idle + 1
        if idle < DTX_HANGOVER:
            payload = self.silence
        elif (idle - DTX_HANGOVER) % DTX_EVERY:
            self._last_slot_empty = True
            return
        else:
            payload = self._dtx_payload
        stats = self.stats
        if not stats.frames_sent:
            stats.first_sent_at = now
        stats.frames_sent += 1
        stats.silence_frames += 1
        stats.bytes_sent += len(payload)
        self._emit(payload, None, 0, slot, now, ntp, ast, ast_bytes, self._header)

    def _emit(
        self, payload: bytes, owner: FrameOwner | None, index: int, slot: int, now: float,
        ntp: int, ast: int, ast_bytes: bytes, header: RtpHeaderTemplate,
    ) -> None:
        self._last_slot_empty = False
        timestamp = (self._ts_origin + slot * RTP_TICKS_PER_FRAME) & 0xFFFFFFFF
        seq = self._seq
        self._seq = (seq + 1) & 0xFFFF
        red = self.sink.red
        how = 0  # the store's PLAIN, or RED_REBUILT + the previous packets it carries
        primary = payload
        if red is not None:
            payload, how = red.wrap(payload, timestamp, now)
            if how:
                header = self._red_header or header
        drop = self.sink.drop_first_tx
        compiled = self._compiled
        # the compiled path keeps the SR counters itself (in C), on success
        if compiled is None or drop is not None or not compiled(
            header.second_byte, seq, timestamp, ast, ntp, payload
        ):
            # the Python path (also for the tests' first-transmission filter, which needs the
            # packet's bytes, and whenever the compiled path could not stage it)
            sender = self._sender
            assert sender is not None
            aiortc_compat.note_rtp_sent(sender, timestamp, ntp, len(payload))
            data = header.build(seq, timestamp, ast_bytes, payload)
            if drop is None or not drop(data):
                self._transmit(data, sender, self._direct)
        # Recorded (and its owner told) last: a failing owner callback loses nothing sent.
        # A RED packet as its primary: the store rebuilds the RED payload if it is NACKed.
        self.store.record_sent(seq, timestamp, primary, owner, index, ast, now, how)

    def _transmit(
        self, data: bytes, sender: RTCRtpSender, direct: Callable[[bytes], bool] | None
    ) -> None:
        """RTP or RTCP (``direct``: the stream's RTP or RTCP direct sender) on the socket, or
        through aiortc's async path where there is no direct one; nothing once it is gone."""
        try:
            if direct is not None and direct(data):
                return
        except ConnectionError:
            return
        self._send_later(data, sender)

    def _send_later(self, data: bytes, sender: RTCRtpSender) -> None:
        """Through aiortc's async path (no direct socket: a TURN relay), bounded."""
        if sender.transport.state != "connected":
            return
        if len(self._pending_sends) >= MAX_PENDING_ASYNC:
            self.stats.async_dropped += 1
            return
        self.stats.async_sends += 1
        task = asyncio.get_running_loop().create_task(self._send_async(data))
        self._pending_sends.add(task)
        task.add_done_callback(self._pending_sends.discard)
