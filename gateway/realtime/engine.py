"""One Realtime session as a state machine, with no transport in it: client events in
(``handle_text`` / ``handle``), server events out (``outbox``), audio out as deltas.

Underneath it is our duplex loop's parts: the speaker of a ``Conversation`` (PCM frames, not
Opus: ``encode=False``), a ``Listener`` (VAD -> turns -> Whisper in its child process) built
from the session's ``turn_detection``, and the gateway's agent. This module holds the session
state, the client events, the input audio (the listener's turns as items, or a buffer the
client commits itself with no turn detection: bounded, ``MAX_BUFFER_S``) and the preemptive
reply; a response's lifecycle is ``responder.Responder``'s, its audio over a WebSocket
``audio_deltas.AudioDeltas``' (paced deltas, so a barge-in or ``response.cancel`` finds most of
a long reply still on the server: cut there).

Over a WebRTC call (``audio_out="rtp"``) the reply is the call's RTP stream instead (the
conversation's Opus frames, paced by its sink): the responder follows what plays. The
microphone comes in through ``hear`` (24 kHz PCM, 20 ms at a time, from the call's receive
path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import turn_model
from gateway.listen.asr import RecognitionError
from gateway.listen.listener import (
    FinalTranscript,
    Listener,
    SegmentSkipped,
    TentativeTranscript,
    TranscriptionFailed,
)
from gateway.listen.turn_model import TurnModel
from gateway.listen.turns import BargeIn, SpeechStarted, SpeechStopped, TurnOptions
from gateway.listen.vad import build_vad
from gateway.media.fanout import SinkPolicy
from gateway.media.resample import Resampler
from gateway.realtime.agent_input import agent_input
from gateway.realtime.audio_deltas import AudioDeltas
from gateway.realtime.audio_formats import BadAudio, InputDecoder
from gateway.realtime.beta import to_beta, to_ga
from gateway.realtime.config import SessionConfig, VadSettings
from gateway.realtime.input_buffer import ASR_RATE, FRAME, FrameCutter, InputBuffer
from gateway.realtime.items import Item, Items, item_from_client
from gateway.realtime.outbox import Outbox
from gateway.realtime.prepared import PreparedReply
from gateway.realtime.protocol import (
    ClientError,
    checked,
    decode_audio,
    error_event,
    new_id,
    parse_client_event,
    server_event,
)
from gateway.realtime.responder import Responder
from gateway.realtime.response import Clause, Hearing, Response, heard_transcript
from gateway.text.streaming import stream_clauses
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)

SINK = "realtime"


VoiceResolver = Callable[[str], Synthesizer]


class RealtimeEngine:
    def __init__(self, session_id: str, conversation: Conversation, hearing: Hearing,
                 voices: VoiceResolver, config: SessionConfig, outbox: Outbox | None = None,
                 expires_s: float = 3600.0, audio_out: str = "deltas") -> None:
        self.id = session_id
        self.audio_out = audio_out  # "deltas" (WebSocket) or "rtp" (a WebRTC call)
        self.beta = False  # the client speaks the beta dialect (``use_beta``)
        self.conversation = conversation
        self.hearing = hearing
        self.voices = voices
        self.config = config
        self.outbox = outbox if outbox is not None else Outbox()
        self.expires_at = int(time.time() + expires_s)
        self.items = Items()
        self.responder = Responder(conversation, hearing, config, self.items,
                                   audio_out=audio_out, emit=self._emit, spawn=self._spawn,
                                   voice=self._voice, discard=self._discard)
        self.deltas = AudioDeltas(self.outbox, self.responder, self._emit)
        if audio_out == "deltas":
            conversation.attach_sink(SINK, self.deltas.sink, SinkPolicy.BLOCK)
        else:
            conversation.events.on_event(self.responder.on_speech_event, words=False)
        self._uplink = Resampler(24_000, ASR_RATE)
        self._decoder = InputDecoder(config.input_format["type"], ASR_RATE)
        self._frames = FrameCutter()  # to the listener
        self._buffer = InputBuffer()  # committed by hand (no turn detection)
        self._input_samples = 0  # all audio heard, for audio_start_ms / audio_end_ms
        self.listener: Listener | None = None
        self._listener_at = 0  # _input_samples when the listener started
        self._listen_task: asyncio.Task[None] | None = None
        self._turn_items: dict[int, Item] = {}
        self._prepared: PreparedReply | None = None
        self.replies_prepared = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pump: asyncio.Task[None] | None = None
        self.closed = False
        self.events_in = 0
        #: a client event other than an append, or the user's speech (the idle sweep's clock)
        self.last_activity = time.monotonic()
        self.errors = 0
        self.barge_ins = 0

    @property
    def response(self) -> Response | None:
        """The latest response (done or not)."""
        return self.responder.response

    def use_beta(self) -> None:
        """Speak the beta dialect (``OpenAI-Beta: realtime=v1``): gateway/realtime/beta.py."""
        self.beta = True
        self.outbox.translate = to_beta

    # -- life -------------------------------------------------------------------------------
    def start(self) -> None:
        self._emit("session.created", session=self._session_json())
        self._rebuild_listener()
        if self.audio_out == "deltas":
            self._pump = asyncio.get_running_loop().create_task(self.deltas.run(),
                                                                name="realtime-audio")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.response is not None and not self.response.done:
            self.responder.cancel(self.response, "client_cancelled", emit=False)
        self._drop_prepared()
        tasks = [t for t in (self._pump, self._listen_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        if self.listener is not None:
            await self.listener.close()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self.audio_out == "deltas":
            self.conversation.detach_sink(SINK)
        self.outbox.close()

    def _spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _emit(self, type: str, **fields: Any) -> None:
        self.outbox.put(server_event(type, **fields))

    def _error(self, error: ClientError) -> None:
        self.errors += 1
        self.outbox.put(error_event(error))

    def _session_json(self) -> dict[str, Any]:
        return self.config.as_json(self.id, self.expires_at)

    def session_json(self) -> dict[str, Any]:
        """The session's config as ``session.created`` shows it (GA)."""
        return self._session_json()

    # -- client events ------------------------------------------------------------------------
    async def handle_text(self, text: str | bytes) -> None:
        """One message from the client; a bad one is answered with an ``error`` event."""
        self.events_in += 1
        try:
            event = parse_client_event(text)
            if self.beta:
                event = to_ga(event)
            await self.handle(event)
        except ClientError as exc:
            self._error(exc)
        except Exception as exc:  # a bug of ours: this event fails, the session goes on
            log.exception("realtime event failed")
            self._error(ClientError("server_error", f"the event failed: {exc!r}",
                                    type="server_error"))

    async def handle(self, event: dict[str, Any]) -> None:
        kind, event_id = event["type"], event.get("event_id")
        if kind != "input_audio_buffer.append":
            self.last_activity = time.monotonic()
        if kind == "input_audio_buffer.append":
            await self._append(decode_audio(event), event_id)
        elif kind == "session.update":
            self._session_update(checked(event, "session", dict, required=True), event_id)
        elif kind == "input_audio_buffer.commit":
            self._commit(event_id)
        elif kind == "input_audio_buffer.clear":
            self._clear()
        elif kind == "conversation.item.create":
            self._item_create(event, event_id)
        elif kind == "conversation.item.retrieve":
            item = self._item(event, event_id)
            self._emit("conversation.item.retrieved", item=item.as_json())
        elif kind == "conversation.item.delete":
            item = self._item(event, event_id)
            self.items.delete(item.id)
            self._emit("conversation.item.deleted", item_id=item.id)
        elif kind == "conversation.item.truncate":
            self._truncate(event, event_id)
        elif kind == "response.create":
            self.responder.create(checked(event, "response", dict, default={}), event_id)
        elif kind == "response.cancel":
            response = self.response
            wanted = checked(event, "response_id", str)
            if response is None or response.done or wanted not in (None, response.id):
                raise ClientError("response_cancel_not_active",
                                  "Cancellation failed: no active response found", None,
                                  event_id)
            self.responder.cancel(response, "client_cancelled")
        elif kind == "output_audio_buffer.clear":
            self.clear_output(event_id)

    def clear_output(self, event_id: str | None) -> None:
        if self.audio_out == "rtp":
            response = self.response
            if response is not None and not response.done:
                self.responder.cancel(response, "client_cancelled")
            else:
                self.conversation.interrupt()
                self._emit("output_audio_buffer.cleared", response_id=None)
            return
        raise ClientError("unsupported_event", "output_audio_buffer.clear is for WebRTC "
                          "calls; over a WebSocket cancel the response and truncate its item",
                          "type", event_id)

    def _item(self, event: dict[str, Any], event_id: str | None) -> Item:
        item_id = checked(event, "item_id", str, required=True)
        item = self.items.get(item_id)
        if item is None:
            raise ClientError("item_not_found", f"no item {item_id!r} in the conversation",
                              "item_id", event_id)
        return item

    def _session_update(self, raw: dict[str, Any], event_id: str | None) -> None:
        before = (self.config.vad, self.config.input_format["type"])
        if "audio" in raw and isinstance(raw["audio"], dict):
            voice = ((raw["audio"].get("output") or {}).get("voice"))
            if isinstance(voice, dict):
                voice = voice.get("id")
            if isinstance(voice, str):
                self._voice(voice, event_id)  # an unknown voice is refused before any change
        self.config.update(raw, event_id)
        if self.config.input_format["type"] != before[1]:
            self._decoder = InputDecoder(self.config.input_format["type"], ASR_RATE)
        if self.config.vad != before[0]:
            self._rebuild_listener()
        self._emit("session.updated", session=self._session_json())

    def _voice(self, name: str, event_id: str | None) -> Synthesizer:
        try:
            return self.voices(name)
        except LookupError as exc:
            raise ClientError("unknown_voice", str(exc), "session.audio.output.voice",
                              event_id) from None

    # -- input audio --------------------------------------------------------------------------
    def _rebuild_listener(self) -> None:
        old, old_task = self.listener, self._listen_task
        self.listener = self._listen_task = None
        if old is not None:
            self._spawn(_close_listener(old, old_task), "listener-close")
        for item in self._turn_items.values():  # its turn will not be transcribed now
            if item.transcribed is not None and not item.transcribed.done():
                self._transcribed(item, None, "the turn detector was reconfigured mid-turn")
        self._turn_items.clear()
        self._frames.reset()
        vad = self.config.vad
        if vad is None:
            return
        h = self.hearing
        turns = TurnOptions(threshold=vad.threshold,
                            release=max(0.01, min(vad.threshold, vad.threshold - 0.15)),
                            stop_ms=vad.silence_duration_ms, pre_speech_ms=vad.prefix_padding_ms,
                            barge_in_ms=h.barge_in_ms,
                            post_speech_ms=min(200, h.speculate_ms or 200))
        self.listener = Listener(h.recognizer, vad=build_vad(h.vad), turns=turns,
                                 partials=False, speculate_ms=h.speculate_ms,
                                 turn_model=self._turn_model(vad), semantic=vad.semantic)
        self._listener_at = self._input_samples
        self._listen_task = asyncio.get_running_loop().create_task(
            self._listen(self.listener), name="realtime-listen")

    def _turn_model(self, vad: VadSettings) -> TurnModel | None:
        """semantic_vad: the process's Smart Turn model (its child started off the loop);
        without the model's file installed, the silence detector (logged)."""
        if vad.semantic is None:
            return None
        try:
            return turn_model("smart-turn")
        except FileNotFoundError as exc:
            log.warning("semantic_vad served by the silence detector: %s", exc)
            return None

    async def _append(self, data: bytes, event_id: str | None) -> None:
        try:
            pcm = self._decoder.decode(data)
        except BadAudio as exc:
            raise ClientError("invalid_audio", f"audio is not {self.config.input_format['type']}"
                              f": {exc}", "audio", event_id) from None
        if self.listener is None:
            self._buffer.add(pcm, event_id)
            self._input_samples += pcm.size
            return
        slice_samples = 25 * FRAME  # a long append never holds the loop (0.5 s a slice)
        for at in range(0, pcm.size, slice_samples):
            if at:
                await asyncio.sleep(0)
            self._feed(pcm[at:at + slice_samples])

    def hear(self, pcm24k: np.ndarray) -> None:
        """A call's microphone: 24 kHz PCM as its receive path plays it (20 ms at a time)."""
        if self.closed:
            return
        pcm = self._uplink.push(pcm24k)
        if self.listener is None:
            if self._buffer.has_room(pcm.size):
                self._buffer.keep(pcm)
            self._input_samples += pcm.size
            return
        self._feed(pcm)

    def _feed(self, pcm: np.ndarray) -> None:
        """16 kHz audio to the listener, in its 20 ms frames (a barge-in acted on at once)."""
        listener = self.listener
        if listener is None:
            return
        for frame in self._frames.frames(pcm):
            self._input_samples += FRAME
            for turn_event in listener.push(frame):
                if isinstance(turn_event, BargeIn):
                    self._barge_in()

    def _ms(self, listener_seconds: float) -> int:
        return round(self._listener_at * 1000 / ASR_RATE + listener_seconds * 1000)

    def _barge_in(self) -> None:
        vad = self.config.vad
        response = self.response
        if vad is not None and vad.interrupt_response and response is not None \
                and not response.done:
            self.barge_ins += 1
            self.responder.cancel(response, "turn_detected")

    async def _listen(self, listener: Listener) -> None:
        async for event in listener.events():
            try:
                self._on_listen(listener, event)
            except Exception:  # one bad event must not stop hearing
                log.exception("realtime listen event failed")

    def _on_listen(self, listener: Listener, event: object) -> None:
        if isinstance(event, SpeechStarted):
            item = Item(new_id("item"), "message", "user",
                        [{"type": "input_audio", "transcript": None}], status="in_progress")
            self._turn_items[listener.turn] = item
            self.last_activity = time.monotonic()
            self._emit("input_audio_buffer.speech_started", audio_start_ms=self._ms(event.at),
                       item_id=item.id)
        elif isinstance(event, SpeechStopped):
            item = self._turn_items.get(listener.turn)
            if item is None:
                return
            self._emit("input_audio_buffer.speech_stopped", audio_end_ms=self._ms(event.at),
                       item_id=item.id)
            self._add_audio_item(item)
        elif isinstance(event, TentativeTranscript):
            self._prepare(event.turn, event.text.strip())
        elif isinstance(event, FinalTranscript | SegmentSkipped | TranscriptionFailed):
            item = self._turn_items.pop(event.turn, None)
            prepared, self._prepared = self._prepared, None
            if prepared is not None and (not isinstance(event, FinalTranscript) or (
                    prepared.turn, prepared.text) != (event.turn, event.text.strip())):
                self._discard(prepared)
                prepared = None
            if item is None:
                if prepared is not None:
                    self._discard(prepared)
                return
            if isinstance(event, TranscriptionFailed):
                self._transcribed(item, None, str(event.error))
                return
            text = event.text.strip() if isinstance(event, FinalTranscript) else ""
            self._transcribed(item, text)
            vad = self.config.vad
            if text and vad is not None and vad.create_response and (
                    self.response is None or self.response.done):
                self.responder.start({}, None, prepared)
            elif prepared is not None:
                self._discard(prepared)

    # -- the preemptive reply -------------------------------------------------------------------
    def _prepare(self, turn: int, text: str) -> None:
        """A tentative transcript: begin the reply to it (see prepared.py), unless the one
        prepared already answers the same text or no response would follow the turn."""
        vad = self.config.vad
        old = self._prepared
        if old is not None and (old.turn, old.text) == (turn, text):
            return
        self._drop_prepared()
        if not text or vad is None or not vad.create_response \
                or "audio" not in self.config.output_modalities \
                or (self.response is not None and not self.response.done):
            return
        history = agent_input(list(self.items), self.config.instructions, None)[1]
        stream = stream_clauses(self.hearing.agent.reply(text, history))
        prepared = PreparedReply(turn, text, stream)
        voice = self._voice(self.config.voice, None)
        prepared.task = self._spawn(prepared.read_first(self.conversation.speaker, voice),
                                    "realtime-prepare")
        self._prepared = prepared
        self.replies_prepared += 1

    def _drop_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._discard(prepared)

    def _discard(self, prepared: PreparedReply) -> None:
        self._spawn(prepared.discard(), "realtime-prepare-discard")

    # -- the user's audio as items (turns, or a commit) -----------------------------------------
    def _add_audio_item(self, item: Item) -> None:
        item.transcribed = asyncio.get_running_loop().create_future()
        previous = self.items.add(item)
        self._emit("input_audio_buffer.committed", previous_item_id=previous, item_id=item.id)
        self._emit("conversation.item.added", previous_item_id=previous, item=item.as_json())

    def _transcribed(self, item: Item, text: str | None, error: str | None = None) -> None:
        item.status = "completed"
        if self.config.transcription is not None:
            if error is not None:
                self._emit("conversation.item.input_audio_transcription.failed",
                           item_id=item.id, content_index=0,
                           error={"type": "transcription_error", "code": "asr_failed",
                                  "message": error, "param": None})
            else:
                item.content[0]["transcript"] = text
                if text:
                    self._emit("conversation.item.input_audio_transcription.delta",
                               item_id=item.id, content_index=0, delta=text)
                self._emit("conversation.item.input_audio_transcription.completed",
                           item_id=item.id, content_index=0, transcript=text or "",
                           usage={"type": "duration", "seconds": 0.0})
        if item.transcribed is not None and not item.transcribed.done():
            item.transcribed.set_result(text or "")
        item.heard = text or ""  # for the agent, even with transcription off
        self._emit("conversation.item.done", item=item.as_json())

    def _commit(self, event_id: str | None) -> None:
        if self.listener is not None:
            if not self.listener.detector.in_speech:
                raise ClientError("input_audio_buffer_commit_empty", "Error committing input "
                                  "audio buffer: no speech in it", None, event_id)
            self.listener.flush()
            return
        audio = self._buffer.take(event_id)
        item = Item(new_id("item"), "message", "user",
                    [{"type": "input_audio", "transcript": None}], status="in_progress")
        self._add_audio_item(item)
        self._spawn(self._transcribe(item, audio), "realtime-transcribe")

    async def _transcribe(self, item: Item, audio: np.ndarray) -> None:
        try:
            transcript = await self.hearing.recognizer.transcribe(audio, final=True)
        except RecognitionError as exc:
            self._transcribed(item, None, str(exc))
            return
        self._transcribed(item, "" if transcript is None else transcript.text.strip())

    def _clear(self) -> None:
        self._buffer.clear()
        self._frames.reset()
        if self.listener is not None and self.listener.detector.in_speech:
            self._rebuild_listener()  # forget the turn being heard
        self._emit("input_audio_buffer.cleared")

    # -- items --------------------------------------------------------------------------------
    def _item_create(self, event: dict[str, Any], event_id: str | None) -> None:
        item = item_from_client(event.get("item"), event_id)
        previous_id = checked(event, "previous_item_id", str)
        audio: np.ndarray | None = None
        for part in item.content:
            if part.get("type") == "input_audio" and part.get("audio"):
                data = decode_audio(part)
                try:
                    pcm = InputDecoder(self.config.input_format["type"], ASR_RATE).decode(data)
                except BadAudio as exc:
                    raise ClientError("invalid_audio", str(exc), "item.content.audio",
                                      event_id) from None
                audio = pcm if audio is None else np.concatenate((audio, pcm))
                part.pop("audio")
                part.setdefault("transcript", None)
        previous = self.items.add(item, previous_id, event_id)
        self._emit("conversation.item.added", previous_item_id=previous, item=item.as_json())
        if audio is not None and not any(p.get("transcript") for p in item.content):
            item.status = "in_progress"
            item.transcribed = asyncio.get_running_loop().create_future()
            self._spawn(self._transcribe(item, audio), "realtime-transcribe")
            return
        self._emit("conversation.item.done", item=item.as_json())

    def _truncate(self, event: dict[str, Any], event_id: str | None) -> None:
        item = self._item(event, event_id)
        content_index = checked(event, "content_index", int, required=True)
        audio_end_ms = checked(event, "audio_end_ms", int, required=True)
        if item.role != "assistant" or content_index != 0 or not item.content \
                or item.content[0].get("type") not in ("audio", "output_audio"):
            raise ClientError("invalid_value", "only an assistant message's audio can be "
                              "truncated", "item_id", event_id)
        if not 0 <= audio_end_ms <= item.audio_ms + 1:
            raise ClientError("invalid_value", f"audio_end_ms {audio_end_ms} is past the "
                              f"item's audio ({item.audio_ms:.0f} ms)", "audio_end_ms", event_id)
        response = self.response
        if response is not None and response.item is item and not response.done:
            self.responder.cancel(response, "client_cancelled")
        heard = heard_transcript(self._clauses_of(item), audio_end_ms)
        item.content[0]["transcript"] = heard
        item.audio_ms = float(audio_end_ms)
        self._emit("conversation.item.truncated", item_id=item.id, content_index=0,
                   audio_end_ms=audio_end_ms)

    def _clauses_of(self, item: Item) -> list[Clause]:
        return item.clauses

    # -- state ----------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.responder.active is not None or bool(len(self.deltas.sink))

    def state(self) -> dict[str, Any]:
        return {"model": self.config.model, "items": len(self.items),
                "responses": dict(self.responder.responses), "events_in": self.events_in,
                "errors_sent": self.errors, "barge_ins": self.barge_ins,
                "replies_prepared": self.replies_prepared,
                "replies_prepared_used": self.responder.replies_prepared_used,
                "outbox": {"queued": len(self.outbox), "sent": self.outbox.sent,
                           "high_water": self.outbox.high_water},
                "turn_detection": (self.config.turn_detection or {}).get("type"),
                "turn_detector": None if self.listener is None else self.listener.turn_detector,
                "response": None if self.response is None else
                {"id": self.response.id, "status": self.response.status}}


async def _close_listener(listener: Listener, task: asyncio.Task[None] | None) -> None:
    await listener.close()
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

