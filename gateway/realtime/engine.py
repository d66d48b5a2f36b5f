"""One Realtime session as a state machine, with no transport in it: client events in
(``handle_text`` / ``handle``), server events out (``outbox``), audio out as deltas.

Underneath it is our duplex loop's parts: the speaker of a ``Conversation`` (PCM frames, not
Opus: ``encode=False``), a ``Listener`` (VAD -> turns -> Whisper in its child process) built
from the session's ``turn_detection``, and the gateway's agent. A response asks the agent with
the conversation's items as its history and speaks its clauses as they come; its audio leaves
as ``response.output_audio.delta`` paced at real time plus ``OUTPUT_LEAD_MS`` (the first delta
at once), so a barge-in or ``response.cancel`` finds most of a long reply still on the server:
it is cut there (``response.done`` ``cancelled``; no delta of it follows). With no turn
detection the client commits the input buffer itself (bounded: ``MAX_BUFFER_S``).

Over a WebRTC call (``audio_out="rtp"``) the reply is the call's RTP stream instead (the
conversation's Opus frames, paced by its sink): a clause's transcript delta goes out when its
utterance starts playing, ``output_audio_buffer.started``/``stopped`` frame what plays, and a
cut reply is truncated to what the sink sent (``output_audio_buffer.cleared``,
``conversation.item.truncated``). The microphone comes in through ``hear`` (24 kHz PCM, 20 ms
at a time, from the call's receive path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from gateway.agent.base import AgentError, Message
from gateway.agent.openai_chat import ToolCallDelta
from gateway.conversation.conversation import Conversation
from gateway.conversation.duplex import turn_model
from gateway.conversation.events import Event
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
from gateway.media.frame_queue import FrameQueue
from gateway.media.resample import Resampler
from gateway.realtime.audio_formats import BadAudio, InputDecoder, OutputEncoder
from gateway.realtime.beta import to_beta, to_ga
from gateway.realtime.config import SessionConfig, VadSettings, audio_format, modalities
from gateway.realtime.items import Item, Items, item_from_client
from gateway.realtime.outbox import Outbox
from gateway.realtime.prepared import PreparedReply
from gateway.realtime.protocol import (
    ClientError,
    checked,
    decode_audio,
    encode_audio,
    error_event,
    new_id,
    parse_client_event,
    server_event,
)
from gateway.realtime.response import Clause, Hearing, Response, heard_transcript
from gateway.realtime.tools import chat_messages, chat_tool_choice, chat_tools
from gateway.speech.speaker import SpeechQueueFull
from gateway.speech.utterance import Delivery, UtteranceState
from gateway.text.streaming import stream_clauses
from gateway.tts.base import Synthesizer

log = logging.getLogger(__name__)

ASR_RATE, FRAME = 16_000, 320  # the listener's 20 ms frames
OUTPUT_LEAD_MS = 500  # audio sent ahead of real time
DELTA_FRAMES = 5  # at most 100 ms of audio per delta (the first of a clause goes alone)
MAX_BUFFER_S = 60  # the input buffer without turn detection
MIN_COMMIT_MS = 100  # OpenAI's least committable buffer
HISTORY_MESSAGES = 40
TRANSCRIPT_WAIT_S = 30.0  # a response waits this long for its input's transcription
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
        self.response: Response | None = None
        self.responses = {"completed": 0, "cancelled": 0, "failed": 0, "incomplete": 0}
        self._by_utterance: dict[str, tuple[Response, Clause]] = {}
        self._sink = FrameQueue(50)
        if audio_out == "deltas":
            conversation.attach_sink(SINK, self._sink, SinkPolicy.BLOCK)
        else:
            conversation.events.on_event(self._on_speech_event)
        self._uplink = Resampler(24_000, ASR_RATE)
        self._playing: Response | None = None  # rtp: the response whose audio is playing
        self._decoder = InputDecoder(config.input_format["type"], ASR_RATE)
        self._pending = np.zeros(0, dtype=np.int16)  # under one listener frame
        self._buffer: list[np.ndarray] = []  # committed by hand (no turn detection)
        self._buffered = 0
        self._input_samples = 0  # all audio heard, for audio_start_ms / audio_end_ms
        self.listener: Listener | None = None
        self._listener_at = 0  # _input_samples when the listener started
        self._listen_task: asyncio.Task[None] | None = None
        self._turn_items: dict[int, Item] = {}
        self._prepared: PreparedReply | None = None
        self.replies_prepared = 0
        self.replies_prepared_used = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pump: asyncio.Task[None] | None = None
        self._play_until = 0.0  # when the client has played everything sent (paced)
        self.lead_s = OUTPUT_LEAD_MS / 1000  # how far ahead of real time audio may be sent
        self.closed = False
        self.events_in = 0
        #: a client event other than an append, or the user's speech (the idle sweep's clock)
        self.last_activity = time.monotonic()
        self.errors = 0
        self.barge_ins = 0

    def use_beta(self) -> None:
        """Speak the beta dialect (``OpenAI-Beta: realtime=v1``): gateway/realtime/beta.py."""
        self.beta = True
        self.outbox.translate = to_beta

    # -- life -------------------------------------------------------------------------------
    def start(self) -> None:
        self._emit("session.created", session=self._session_json())
        self._rebuild_listener()
        if self.audio_out == "deltas":
            self._pump = asyncio.get_running_loop().create_task(self._pump_audio(),
                                                                name="realtime-audio")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.response is not None and not self.response.done:
            self._cancel(self.response, "client_cancelled", emit=False)
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
            self._response_create(checked(event, "response", dict, default={}), event_id)
        elif kind == "response.cancel":
            response = self.response
            wanted = checked(event, "response_id", str)
            if response is None or response.done or wanted not in (None, response.id):
                raise ClientError("response_cancel_not_active",
                                  "Cancellation failed: no active response found", None,
                                  event_id)
            self._cancel(response, "client_cancelled")
        elif kind == "output_audio_buffer.clear":
            self.clear_output(event_id)

    def clear_output(self, event_id: str | None) -> None:
        if self.audio_out == "rtp":
            response = self.response
            if response is not None and not response.done:
                self._cancel(response, "client_cancelled")
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
        self._pending = np.zeros(0, dtype=np.int16)
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
            if self._buffered + pcm.size > MAX_BUFFER_S * ASR_RATE:
                raise ClientError("input_audio_buffer_full", f"the input audio buffer holds at "
                                  f"most {MAX_BUFFER_S} s: commit or clear it", "audio", event_id)
            self._buffer.append(pcm)
            self._buffered += pcm.size
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
            if self._buffered + pcm.size <= MAX_BUFFER_S * ASR_RATE:
                self._buffer.append(pcm)
                self._buffered += pcm.size
            self._input_samples += pcm.size
            return
        self._feed(pcm)

    def _feed(self, pcm: np.ndarray) -> None:
        """16 kHz audio to the listener, in its 20 ms frames (a barge-in acted on at once)."""
        listener = self.listener
        if listener is None:
            return
        if self._pending.size:
            pcm = np.concatenate((self._pending, pcm))
        cut = pcm.size - pcm.size % FRAME
        self._pending = pcm[cut:]
        for start in range(0, cut, FRAME):
            self._input_samples += FRAME
            for turn_event in listener.push(pcm[start:start + FRAME]):
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
            self._cancel(response, "turn_detected")

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
                self._start_response({}, None, prepared)
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
        history = self._agent_input_for(list(self.items), self.config.instructions, None)[1]
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
        if self._buffered < MIN_COMMIT_MS * ASR_RATE // 1000:
            raise ClientError("input_audio_buffer_commit_empty", "Error committing input audio "
                              f"buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms of "
                              f"audio, but buffer only has "
                              f"{self._buffered * 1000 // ASR_RATE}ms of audio.", None, event_id)
        audio = np.concatenate(self._buffer)
        self._buffer, self._buffered = [], 0
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
        self._buffer, self._buffered = [], 0
        self._pending = np.zeros(0, dtype=np.int16)
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
            self._cancel(response, "client_cancelled")
        heard = heard_transcript(self._clauses_of(item), audio_end_ms)
        item.content[0]["transcript"] = heard
        item.audio_ms = float(audio_end_ms)
        self._emit("conversation.item.truncated", item_id=item.id, content_index=0,
                   audio_end_ms=audio_end_ms)

    def _clauses_of(self, item: Item) -> list[Clause]:
        return item.clauses

    # -- responses ----------------------------------------------------------------------------
    def _response_create(self, raw: dict[str, Any], event_id: str | None) -> None:
        if self.response is not None and not self.response.done:
            raise ClientError("conversation_already_has_active_response", "Conversation already "
                              f"has an active response in progress: {self.response.id}. Wait "
                              "until the response is finished before creating a new one.",
                              None, event_id)
        self._start_response(raw, event_id)

    def _start_response(self, raw: dict[str, Any], event_id: str | None,
                        prepared: PreparedReply | None = None) -> None:
        cfg = self.config
        mods = modalities(raw["output_modalities"], "response.output_modalities", event_id) \
            if raw.get("output_modalities") is not None else cfg.output_modalities
        instructions = checked(raw, "instructions", str, default=cfg.instructions)
        conversation = checked(raw, "conversation", str, default="auto")
        if conversation not in ("auto", "none"):
            raise ClientError("invalid_value", 'conversation must be "auto" or "none"',
                              "response.conversation", event_id)
        context = list(self.items)
        if raw.get("input") is not None:
            if not isinstance(raw["input"], list) or len(raw["input"]) > 64:
                raise ClientError("invalid_value", "input must be a list of items (64 at most)",
                                  "response.input", event_id)
            context = []
            for entry in raw["input"]:
                if isinstance(entry, dict) and entry.get("type") == "item_reference":
                    ref = self.items.get(str(entry.get("id")))
                    if ref is None:
                        raise ClientError("item_not_found", f"no item {entry.get('id')!r}",
                                          "response.input", event_id)
                    context.append(ref)
                else:
                    context.append(item_from_client(entry, event_id))
        audio = (raw.get("audio") or {}).get("output") or {}
        voice = self._voice(audio["voice"] if isinstance(audio.get("voice"), str)
                            else cfg.voice, event_id)
        fmt = cfg.output_format
        if audio.get("format") is not None:
            fmt = audio_format(audio["format"], "response.audio.output.format", event_id)
        item = Item(new_id("item"), "message", "assistant", [], status="in_progress")
        response = Response(new_id("resp"), item, mods, conversation, instructions, context,
                            fmt, voice, metadata=raw.get("metadata"))
        response.encoder = OutputEncoder(fmt["type"])
        tools = raw["tools"] if isinstance(raw.get("tools"), list) else cfg.tools
        choice = chat_tool_choice(raw.get("tool_choice", cfg.tool_choice))
        if tools and choice != "none" and hasattr(self.hearing.agent, "reply_with_tools"):
            response.tools, response.tool_choice = chat_tools(tools), choice
        if prepared is not None and response.tools:
            self._discard(prepared)  # prepared without the tools
            prepared = None
        response.prepared = prepared
        item.clauses = response.clauses
        self.response = response
        self._emit("response.created", response=response.as_json())
        self._emit("rate_limits.updated", rate_limits=[
            {"name": "requests", "limit": None, "remaining": None, "reset_seconds": None}])
        if not response.tools:
            self._open_message(response)  # with tools: once text comes (it may not)
        response.task = self._spawn(self._respond(response), "realtime-response")

    def _open_message(self, response: Response) -> None:
        item = response.item
        if item in response.outputs:
            return
        response.outputs.append(item)
        previous = self.items.add(item) if response.conversation == "auto" else None
        self._emit("response.output_item.added", response_id=response.id,
                   output_index=response.index(item), item=item.as_json())
        if response.conversation == "auto":
            self._emit("conversation.item.added", previous_item_id=previous,
                       item=item.as_json())
        item.content.append(response.content())
        self._emit("response.content_part.added", response_id=response.id, item_id=item.id,
                   output_index=response.index(item), content_index=0, part=response.part())

    def _tool_delta(self, response: Response, delta: ToolCallDelta) -> None:
        call = response.calls.get(delta.index)
        if call is None:
            if len(response.calls) >= 16:
                return  # a bound: at most 16 calls in one response
            call = Item(new_id("item"), "function_call", call_id=delta.id or new_id("call"),
                        name=delta.name or "", arguments="", status="in_progress")
            response.calls[delta.index] = call
            response.outputs.append(call)
            previous = self.items.add(call) if response.conversation == "auto" else None
            self._emit("response.output_item.added", response_id=response.id,
                       output_index=response.index(call), item=call.as_json())
            if response.conversation == "auto":
                self._emit("conversation.item.added", previous_item_id=previous,
                           item=call.as_json())
        if delta.name and not call.name:
            call.name = delta.name
        if delta.arguments and len(call.arguments or "") < 65_536:
            call.arguments = (call.arguments or "") + delta.arguments
            self._emit("response.function_call_arguments.delta", response_id=response.id,
                       item_id=call.id, output_index=response.index(call),
                       call_id=call.call_id, delta=delta.arguments)

    async def _texts(self, response: Response) -> AsyncIterator[str]:
        """The agent's reply with tools: its text pieces (the message opened on the first),
        its tool calls handled on the way."""
        agent: Any = self.hearing.agent
        own = {i.id for i in response.outputs} | {response.item.id}
        messages = chat_messages(response.context, response.instructions, own)
        stream = agent.reply_with_tools(messages, response.tools, response.tool_choice)
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                if response.done:
                    return
                if isinstance(piece, str):
                    if piece:
                        self._open_message(response)
                        yield piece
                else:
                    self._tool_delta(response, piece)

    def _agent_input(self, response: Response) -> tuple[str, list[Message]]:
        return self._agent_input_for(response.context, response.instructions, response.item)

    @staticmethod
    def _agent_input_for(context: list[Item], instructions: str,
                         own: Item | None) -> tuple[str, list[Message]]:
        """The agent's input: the last user message's text, and the messages before it (the
        instructions first) as its history."""
        messages: list[Message] = []
        for item in context:
            if item is own:
                continue
            text = item.text
            if not text:
                continue
            role = item.role if item.type == "message" and item.role else "user"
            messages.append(Message(role, text))  # type: ignore[arg-type]
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        text = "" if last_user is None else messages[last_user].content
        history = messages[:last_user] if last_user is not None else messages
        history = history[-HISTORY_MESSAGES:]
        if instructions:
            history = [Message("system", instructions), *history]
        return text, history

    async def _respond(self, response: Response) -> None:
        pending = [i.transcribed for i in response.context
                   if i.transcribed is not None and not i.transcribed.done()]
        if response.prepared is not None and not response.audio:
            self._discard(response.prepared)
            response.prepared = None
        if pending and response.prepared is None:
            await asyncio.wait(pending, timeout=TRANSCRIPT_WAIT_S)
        text, history = self._agent_input(response)
        pieces: AsyncIterator[str] = self._texts(response) if response.tools \
            else self.hearing.agent.reply(text, history)
        try:
            if response.audio:
                await self._speak(response, pieces)
            else:
                await self._write(response, pieces)
        except AgentError as exc:
            if not response.done:
                self._finish(response, "failed", {"type": "failed", "error": {
                    "type": "server_error", "code": "agent_failed", "message": str(exc)}})
            return
        if not response.done:
            self._finish(response, "completed")

    async def _write(self, response: Response, stream: AsyncIterator[str]) -> None:
        async with contextlib.aclosing(stream) as pieces:
            async for piece in pieces:
                if response.done:
                    return
                response.text.append(piece)
                self._emit("response.output_text.delta", response_id=response.id,
                           item_id=response.item.id, output_index=response.index(response.item),
                           content_index=0, delta=piece)

    async def _speak(self, response: Response, pieces: AsyncIterator[str]) -> None:
        prepared = response.prepared
        if prepared is None:
            stream = stream_clauses(pieces)
        else:
            stream = prepared.clauses
            with contextlib.suppress(Exception):
                await pieces.aclose()  # type: ignore[attr-defined]  # never started
        async with contextlib.aclosing(stream) as clauses:
            if prepared is not None:
                try:
                    if prepared.task is not None:
                        await prepared.task  # the first clause (an AgentError is the agent's)
                    if prepared.first is not None and not response.done:
                        self.replies_prepared_used += 1
                        self._say(response, prepared.first, prepared.take_prerender())
                finally:
                    leftover = prepared.take_prerender()
                    if leftover is not None:
                        leftover.cancel()
            async for clause in clauses:
                if response.done:
                    return
                self._say(response, clause)
        for entry in list(response.clauses):
            await entry.utterance.finished.wait()
            if response.done:
                return

    def _say(self, response: Response, clause: str, prerendered: Any = None) -> None:
        try:
            utterance = self.conversation.say(clause, response.voice, prerendered=prerendered)
        except SpeechQueueFull:
            if prerendered is not None:
                prerendered.cancel()
            return
        entry = Clause(clause, utterance)
        response.clauses.append(entry)
        self._by_utterance[utterance.id] = (response, entry)

    def _cancel(self, response: Response, reason: str, emit: bool = True) -> None:
        if response.done:
            return
        self.conversation.interrupt()  # the speaker's queue and our sink emptied at once
        if response.task is not None and response.task is not asyncio.current_task():
            response.task.cancel()  # closes the agent's stream and its upstream request
        self._finish(response, "cancelled", {"type": "cancelled", "reason": reason}, emit)
        if self.audio_out == "rtp" and response.audio and emit:
            heard_ms = response.item.audio_ms
            if self._playing is response:
                self._playing = None
                self._emit("output_audio_buffer.cleared", response_id=response.id)
            if response.conversation == "auto" and heard_ms > 0:
                self._emit("conversation.item.truncated", item_id=response.item.id,
                           content_index=0, audio_end_ms=round(heard_ms))

    def _finish(self, response: Response, status: str,
                details: dict[str, Any] | None = None, emit: bool = True) -> None:
        response.status = status
        response.status_details = details
        self.responses[status] = self.responses.get(status, 0) + 1
        for clause in response.clauses:
            self._by_utterance.pop(clause.utterance.id, None)
        item = response.item
        final = "completed" if status == "completed" else "incomplete"
        if item in response.outputs:
            item.status = final
            item.content[0] = response.content()
            if self.audio_out == "rtp":  # what the call's sink sent is what was heard
                for clause in response.clauses:
                    clause.audio_ms = clause.utterance.frames_sent * 20.0
                item.audio_ms = sum(c.audio_ms for c in response.clauses)
                if status == "cancelled":
                    item.content[0]["transcript"] = heard_transcript(response.clauses,
                                                                     item.audio_ms)
        for call in response.calls.values():
            call.status = final
        if not emit:
            return
        for output in response.outputs:
            index = response.index(output)
            if output is item:
                ids = {"response_id": response.id, "item_id": item.id, "output_index": index,
                       "content_index": 0}
                if response.audio:
                    self._emit("response.output_audio.done", **ids)
                    self._emit("response.output_audio_transcript.done", **ids,
                               transcript=response.transcript)
                else:
                    self._emit("response.output_text.done", **ids, text=response.transcript)
                self._emit("response.content_part.done", **ids, part=response.part())
            else:
                self._emit("response.function_call_arguments.done", response_id=response.id,
                           item_id=output.id, output_index=index, call_id=output.call_id,
                           name=output.name, arguments=output.arguments or "")
            self._emit("response.output_item.done", response_id=response.id,
                       output_index=index, item=output.as_json())
            if response.conversation == "auto":
                self._emit("conversation.item.done", item=output.as_json())
        self._emit("response.done", response=response.as_json())
        if self.audio_out == "rtp" and self._playing is response and status != "cancelled":
            self._playing = None
            self._emit("output_audio_buffer.stopped", response_id=response.id)

    # -- audio out ------------------------------------------------------------------------------
    def _on_speech_event(self, event: Event) -> None:
        """rtp: an utterance started playing on the call -> its clause's transcript delta."""
        if event.type != "utterance" or event.data.get("state") != "playing":
            return
        found = self._by_utterance.get(event.data.get("id", ""))
        if found is None:
            return
        response, clause = found
        if response.done or clause.sent:
            return
        if self._playing is not response:
            self._playing = response
            self._emit("output_audio_buffer.started", response_id=response.id)
        self._transcript_delta(response, clause)

    def _transcript_delta(self, response: Response, clause: Clause) -> None:
        clause.sent = True
        spoken = [c for c in response.clauses if c.sent]
        self._emit("response.output_audio_transcript.delta", response_id=response.id,
                   item_id=response.item.id, output_index=response.index(response.item),
                   content_index=0,
                   delta=clause.text if len(spoken) == 1 else " " + clause.text)

    async def _pump_audio(self) -> None:
        """The speaker's frames -> ``response.output_audio.delta``, paced (see the module)."""
        queue = self._sink
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
            self._send_audio(payloads, owner, index, loop.time())

    def _send_audio(self, payloads: list[bytes], owner: Any, index: int, now: float) -> None:
        """One delta, unless its response is over (then its frames are dropped)."""
        count = len(payloads)
        if isinstance(owner, Delivery):
            owner.on_frames_sent(index, count, 0, 0, time.monotonic())
            found = self._by_utterance.get(owner.utterance.id)
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
            self._transcript_delta(response, clause)
        assert response.encoder is not None
        data = response.encoder.encode(b"".join(payloads))
        ms = count * 20.0
        clause.audio_ms += ms
        response.item.audio_ms += ms
        self._play_until = max(self._play_until, now) + ms / 1000
        self._emit("response.output_audio.delta", **ids, delta=encode_audio(data))

    # -- state ----------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return (self.response is not None and not self.response.done) or bool(len(self._sink))

    def state(self) -> dict[str, Any]:
        return {"model": self.config.model, "items": len(self.items),
                "responses": dict(self.responses), "events_in": self.events_in,
                "errors_sent": self.errors, "barge_ins": self.barge_ins,
                "replies_prepared": self.replies_prepared,
                "replies_prepared_used": self.replies_prepared_used,
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

